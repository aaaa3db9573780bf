"""trainctl.launchers.tether: what a command starts inside held() ends with it, SIGKILL of the command included; a
command that starts nothing starts no watchdog (issue 60). Real processes: a Python owner holding a `sleep` child."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

# the owner: held(), then (or not) a child of its own that would outlive it, then it waits to be ended
OWNER = textwrap.dedent(
    """
    import subprocess, sys, time
    from trainctl.launchers.tether import held
    with held():
        if sys.argv[1] == "child":
            subprocess.Popen(["sleep", "120"], start_new_session=True)  # out of the owner's group: nothing else ends it
        print("ready", flush=True)
        time.sleep(120)
    """
)


def _start(what: str) -> tuple[subprocess.Popen, list[psutil.Process]]:
    owner = subprocess.Popen([sys.executable, "-c", OWNER, what], stdout=subprocess.PIPE, text=True)
    assert owner.stdout.readline().strip() == "ready"
    return owner, psutil.Process(owner.pid).children(recursive=True)


def _left(procs: list[psutil.Process], within: float = 10.0) -> list[psutil.Process]:
    deadline = time.monotonic() + within
    left = procs
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [p for p in left if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    return left


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_child_ends_with_its_command_however_it_ends(sig):
    owner, family = _start("child")
    names = sorted(" ".join(p.cmdline()[:3]) for p in family)
    assert any(n.startswith("sleep 120") for n in names) and any("trainctl.launchers.tether" in n for n in names), names
    owner.send_signal(sig)
    owner.wait(30)
    assert not _left(family), names


def test_a_command_that_starts_nothing_starts_no_watchdog():
    owner, family = _start("nothing")
    try:
        assert family == []
    finally:
        owner.kill()
        owner.wait(30)
