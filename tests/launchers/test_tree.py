"""trainctl.launchers.tree: a run's processes, found by their mark and stopped together."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from trainctl.launchers.tree import MARK_VAR, new_mark, stop_marked

# An unmarked parent that starts a marked process and never waits for it: once stopped, that process stays a zombie,
# as a run's orphans do until a container's PID 1 gets round to reaping them
PARENT = f"""
import os, subprocess, sys, time
env = {{**os.environ, "{MARK_VAR}": sys.argv[1]}}
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env=env)
print(child.pid, flush=True)
time.sleep(600)
"""


def test_a_stopped_process_its_parent_has_not_reaped_counts_as_stopped():
    mark = new_mark()
    parent = subprocess.Popen([sys.executable, "-c", PARENT, mark], stdout=subprocess.PIPE, text=True)
    try:
        child = psutil.Process(int(parent.stdout.readline()))
        start = time.monotonic()
        assert stop_marked(mark, grace=10) == 1
        # psutil.wait_procs waited for it until the grace ran out (10 s, then 5 more after a SIGKILL)
        assert time.monotonic() - start < 5, "it waited for a process that had already exited"
        assert child.status() == psutil.STATUS_ZOMBIE and parent.poll() is None, "the parent was left alone"
    finally:
        parent.kill()
        parent.wait()
