"""Runs started in the background (`train --detach`, the server's jobs): trainctl.launch.control."""

from __future__ import annotations

import time

import psutil
import pytest

from tests.launch.conftest import FAST_SFT
from trainctl.launch.control import start_detached
from trainctl.launch.rundir import RunDir


@pytest.mark.slow  # a real (short) SFT run
def test_a_detached_run_that_ends_leaves_no_zombie_under_its_starter(ready, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    started = start_detached([*FAST_SFT, "run.name=bg"], tmp_path / "runs" / "bg")
    deadline = time.monotonic() + 300
    while RunDir(started.run_dir).status().get("state") not in ("finished", "failed") and time.monotonic() < deadline:
        time.sleep(1)
    assert RunDir(started.run_dir).status().get("state") == "finished"
    time.sleep(2)  # its trainctl writes the end, then exits
    mine = [c for c in psutil.Process().children() if c.pid == started.pid]
    assert not mine or mine[0].status() != psutil.STATUS_ZOMBIE, "the ended trainctl was reaped (serve starts many)"
