"""A run's processes, found by the mark in their environment, and stopped together.

Every process of a local run inherits TRAINCTL_RUN_MARK from its trainer: torchrun's ranks, the verl driver, Ray's
gcs_server, raylet, dashboard agents and workers (Ray starts them all with the environment of the process that
called ray.init), MCP servers. Processes that detach (Ray's daemons double-fork, some leave their session) are still
found this way, whoever their parent is now, and nothing on the machine that did not descend from this attempt is
touched. The mark is an identifier, not a secret.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Iterable

import psutil

MARK_VAR = "TRAINCTL_RUN_MARK"


def new_mark() -> str:
    return uuid.uuid4().hex


# a process reads as having no environment between its exec's start and its new stack: briefly, after fork and
# after Popen has returned (measured: 1 in 300 Popen'd processes read as {} at once). A mark scan at that moment
# missed it, and a stop that found nothing else returned with it running.
_EXEC_SETTLE_S = 0.1


def _environ(proc: psutil.Process) -> dict[str, str]:
    env = proc.environ()
    # kernel threads have no environment all their life: only a process started a moment ago is read again
    settle = time.monotonic() + _EXEC_SETTLE_S
    while not env and time.time() - proc.create_time() < 2.0 and time.monotonic() < settle:
        time.sleep(0.005)
        env = proc.environ()
    return env


def marked(mark: str) -> list[psutil.Process]:
    """The live processes carrying this mark (this process excluded)."""
    me = os.getpid()
    found = []
    # not psutil.process_iter(): it yields the Process it cached at its last call for every PID still listed, and
    # for a PID reused since then (a suite or a busy node wraps the PID space) that is the exited process's; its
    # is_running() is then False, and the run's live process went unstopped
    for pid in psutil.pids():
        if pid == me:
            continue
        try:
            proc = psutil.Process(pid)
            if _environ(proc).get(MARK_VAR) == mark and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:  # gone, or another user's
            continue
    # Ray's raylet starts its agents (DashboardAgent, RuntimeEnvAgent) with an environment of its own: they carry no
    # mark, so the descendants of marked processes are the run's too
    known = {p.pid for p in found}
    for proc in list(found):
        with contextlib.suppress(psutil.Error):
            for child in proc.children(recursive=True):
                if child.pid not in known and child.pid != me:
                    known.add(child.pid)
                    found.append(child)
    return found


def _alive(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            pass
    return out


def wait_exited(procs: Iterable[psutil.Process], timeout: float) -> list[psutil.Process]:
    """The processes still running after up to `timeout` seconds. A zombie has exited (only its parent's wait is
    left), so it counts as gone: psutil.wait_procs waits for a process that is not its caller's child until it is
    reaped, and a run's processes are orphans whose new parent, a container's PID 1, may reap late or never (the
    watchdog then waited out the whole grace before it could record the kill)."""
    deadline = time.monotonic() + timeout
    alive = _alive(procs)
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = _alive(alive)
    return alive


def terminate(proc: psutil.Process) -> None:
    """SIGTERM, then SIGCONT, as a shell's `kill` does for a stopped job: a stopped process (SIGSTOP, a frozen worker)
    acts on a SIGTERM only once continued, and would otherwise wait out the grace until its SIGKILL."""
    with contextlib.suppress(psutil.Error):
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGCONT)


def stop_marked(mark: str, extra: Iterable[int] = (), grace: float = 10.0, deadline: float = 25.0) -> int:
    """SIGTERM every process of the run, SIGKILL what is left after `grace` seconds, and scan again until none is
    left or `deadline` seconds have passed (a shutting-down Ray may still start a process). Returns how many
    processes were signalled."""
    start = time.monotonic()
    signalled: set[int] = set()
    extra = list(extra)
    while True:
        procs = {p.pid: p for p in marked(mark)}
        for pid in extra:
            with contextlib.suppress(psutil.Error):
                procs.setdefault(pid, psutil.Process(pid))
        procs = {p.pid: p for p in _alive(procs.values())}
        if not procs:
            return len(signalled)
        for p in procs.values():
            if p.pid in signalled:
                with contextlib.suppress(psutil.Error):
                    p.kill()
            else:
                terminate(p)
            signalled.add(p.pid)
        alive = wait_exited(procs.values(), grace)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()
        wait_exited(alive, 5)
        if time.monotonic() - start > deadline:
            return len(signalled)
        extra = []
        grace = min(grace, 3.0)
