"""The `plugin_probe` fixture: what trainctl's verl plugin does in a fresh process, per environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.shared import once

ZYGOTE = Path(__file__).with_name("probe_zygote.py")
# what tells the plugin what to do: scrubbed, then set as each probe asks
PLUGIN_ENV = ("VERL_PLATFORM", "TRAINCTL_LAUNCHED", "TRAINCTL_REWARD_KIND", "TRAINCTL_TOOL_CALLS")


class Zygote:
    """tests/runtime/probe_zygote.py, started on the first probe: it pays for torch, tensordict and transformers
    once, and each probe imports verl (and the plugin) in a fork of it: about 2 s a probe instead of 11."""

    def __init__(self, stderr: Path):
        self.stderr = stderr
        self.proc: subprocess.Popen | None = None
        self.lock = threading.Lock()

    def _started(self) -> subprocess.Popen:
        if self.proc is None:
            clean = {k: v for k, v in os.environ.items() if k not in PLUGIN_ENV}
            self.proc = subprocess.Popen(
                [sys.executable, str(ZYGOTE), ",".join(PLUGIN_ENV)], env=clean, text=True, stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=self.stderr.open("w"),
            )  # fmt: skip
            assert json.loads(self.proc.stdout.readline() or "{}").get("ready"), self._why()
        return self.proc

    def _why(self) -> str:
        return self.stderr.read_text()[-3000:]

    def probe(self, env: dict[str, str], out: Path) -> dict:
        with self.lock:
            proc = self._started()
            proc.stdin.write(json.dumps({"env": env, "out": str(out)}) + "\n")
            proc.stdin.flush()
            answer = json.loads(proc.stdout.readline() or "{}")
        assert answer.get("exit") == 0, f"the probe failed ({answer}):\n{self._why()}"
        return json.loads(out.read_text().strip().splitlines()[-1])

    def close(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


@pytest.fixture(scope="session")
def plugin_probe(tmp_path_factory):
    """probe(**env) -> the facts tests/runtime/plugin_probe.py prints in a process with that environment, which
    imports verl for the first time (a fork of a zygote that imported verl's heavy dependencies, not verl). Each
    environment is probed once per session, for every test that asks."""
    base = tmp_path_factory.mktemp("plugin-probes")
    zygote = Zygote(base / "zygote.err")

    def probe(**env: str) -> dict:
        name = "plugin-probe-" + "-".join(f"{k}={v}" for k, v in sorted(env.items())).replace("/", "_")
        return once(tmp_path_factory, name, lambda folder: zygote.probe(env, base / f"{name}.json"))

    yield probe
    zygote.close()
