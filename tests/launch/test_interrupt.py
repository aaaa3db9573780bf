"""Ctrl-C stops the whole run: no trainer, data loader or worker process is left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.launch.conftest import FAST_SFT


# slow (half a minute of real verl): every ending of a supervised run, Ctrl-C included, is in the default suite with a
# stand-in trainer and its children (tests/launchers/test_local.py); CI runs both suites (.ci/run)
@pytest.mark.slow
def test_interrupt_leaves_no_processes(ready, tmp_path, cli):
    env = dict(os.environ)
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainctl", "train", *FAST_SFT, "run.epochs=50", "run.name=ctrlc"],
        cwd=tmp_path / "work",
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen: set[int] = set()
    log = tmp_path / "work" / "runs" / "ctrlc" / "logs" / "attempt-1.log"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        seen |= {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
        if log.is_file() and "step:1 " in log.read_text(errors="replace"):
            break
        time.sleep(0.5)
    else:
        proc.kill()
        raise AssertionError("training did not start:\n" + proc.communicate()[0][-3000:])
    assert seen, "the trainer (one process: no torchrun agent) and its data loader's workers"
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out[-2000:]
    assert "was interrupted (Ctrl-C); every process it started was stopped" in out
    alive = [pid for pid in seen if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert alive == [], f"left behind: {alive}"
    row = next(line for line in cli("runs", "ls").stdout.splitlines() if line.startswith("ctrlc "))
    assert " interrupted " in row, row
