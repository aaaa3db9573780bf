"""The `plugin_probe` fixture: what trainctl's verl plugin does in a fresh process, per environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.shared import once

PROBE = Path(__file__).with_name("plugin_probe.py")
# what tells the plugin what to do: scrubbed, then set as each probe asks
PLUGIN_ENV = ("VERL_PLATFORM", "TRAINCTL_LAUNCHED", "TRAINCTL_REWARD_KIND", "TRAINCTL_TOOL_CALLS")


@pytest.fixture(scope="session")
def plugin_probe(tmp_path_factory):
    """probe(**env) -> the facts tests/runtime/plugin_probe.py prints in a fresh process with that environment.
    Importing verl takes seconds, so each environment is probed once per session, for every test that asks."""

    def probe(**env: str) -> dict:
        name = "plugin-probe-" + "-".join(f"{k}={v}" for k, v in sorted(env.items())).replace("/", "_")

        def run(_: Path) -> dict:
            clean = {k: v for k, v in os.environ.items() if k not in PLUGIN_ENV}
            out = subprocess.run([sys.executable, str(PROBE)], env={**clean, **env}, capture_output=True, text=True)
            assert out.returncode == 0, out.stderr[-3000:]
            return json.loads(out.stdout.strip().splitlines()[-1])

        return once(tmp_path_factory, name, run)

    return probe
