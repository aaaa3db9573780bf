"""trainctl.launchers.tree: a run's processes, found by their mark and stopped together."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from trainctl.launchers.tree import MARK_VAR, marked, new_mark, stop_marked, terminate

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


def test_a_stopped_process_ends_on_its_sigterm_not_on_the_sigkill_after_the_grace():
    """A run's process stopped by SIGSTOP (or frozen) gets its SIGTERM only once continued: trainctl continues it
    (as a shell's `kill` does for a stopped job), rather than waiting out the grace for a SIGKILL."""
    mark = new_mark()
    stopped = subprocess.Popen(["sleep", "600"], env={**os.environ, MARK_VAR: mark})
    try:
        stopped.send_signal(signal.SIGSTOP)
        assert stop_marked(mark, grace=30) == 1
        assert stopped.wait(timeout=10) == -signal.SIGTERM  # not -SIGKILL: it did not wait out the 30 s
        alone = subprocess.Popen(["sleep", "600"])
        alone.send_signal(signal.SIGSTOP)
        terminate(psutil.Process(alone.pid))
        assert alone.wait(timeout=10) == -signal.SIGTERM
    finally:
        for proc in (stopped, locals().get("alone")):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def _started_as(pid: int, argv: list[str], env: dict) -> subprocess.Popen:
    """A process started with the given PID (free again), through the kernel's ns_last_pid (root only)."""
    for _ in range(50):  # another process may take the PID first: try again
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(pid - 1))
        proc = subprocess.Popen(argv, env=env)
        if proc.pid == pid:
            return proc
        proc.kill()
        proc.wait()
    pytest.fail(f"PID {pid} was taken every time")


def test_a_marked_process_on_a_reused_pid_is_found_and_stopped():
    """A run's process that got the PID of a process gone since the last scan: psutil.process_iter() would hand back
    its cached Process for the gone one, which is not running, and the live one was left running."""
    if not os.access("/proc/sys/kernel/ns_last_pid", os.W_OK):  # as the browser tests skip without chromium
        pytest.skip("reusing a PID takes a writable /proc/sys/kernel/ns_last_pid (root, outside a read-only /proc/sys)")
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    psutil.process_iter.cache_clear()  # what earlier scans of this process cached plays no part
    gone = subprocess.Popen(sleeper)
    mark = new_mark()
    assert marked(mark) == []  # a scan while `gone` runs under its PID
    gone.kill()
    gone.wait()
    time.sleep(0.05)  # psutil tells processes apart by PID and start time in clock ticks: not in the same tick
    run = _started_as(gone.pid, sleeper, {**os.environ, MARK_VAR: mark})
    try:
        (found,) = marked(mark)
        assert found.pid == run.pid and found.is_running(), "the live process, not the one gone from its PID"
        assert stop_marked(mark, grace=10) == 1
        assert run.wait(timeout=10) == -15  # SIGTERM
    finally:
        run.kill()
        run.wait()


class _Exec:
    """A process as psutil reads it while it execs: no environment for the first `empty` reads."""

    def __init__(self, empty: int, age_s: float):
        self.reads, self.empty, self.started = 0, empty, time.time() - age_s

    def environ(self):
        self.reads += 1
        return {} if self.reads <= self.empty else {MARK_VAR: "m"}

    def create_time(self):
        return self.started


def test_a_process_read_in_the_middle_of_its_exec_is_read_again():
    """Between its exec's start and its new stack a process reads as having no environment (1 in 300 processes
    Popen had just started, measured): the scan reads a young one again rather than miss its mark. The moment cannot
    be provoked at will, so this reads a stand-in."""
    from trainctl.launchers.tree import _environ

    young = _Exec(empty=3, age_s=0.0)
    assert _environ(young) == {MARK_VAR: "m"} and young.reads == 4
    old = _Exec(empty=10**6, age_s=60.0)  # a kernel thread: no environment, ever
    start = time.monotonic()
    assert _environ(old) == {} and old.reads == 1 and time.monotonic() - start < 0.05
