"""What a command starts ends with it, however the command ends (`model serve`, `chat`, `eval`, `serve`).

held() marks every process the command starts from then on (trainctl.launchers.tree's variable, inherited through
the environment: vLLM's server and its EngineCore, vLLM's in-process engine core, MCP servers, lm-eval, a planner)
and, just before the first of them starts (an audit hook on subprocess.Popen, os.fork and os.posix_spawn; watch()
where something may start one another way, as vLLM's multiprocessing), a watchdog in a session of its own, whose
stdin is a pipe only this process writes to. A command that starts nothing (a refused typo, a bad path) starts no
watchdog either: bad input is answered before any process starts. The pipe closes when held() is left or this
process ends, however it ends; the watchdog then lets this process finish exiting (vLLM shuts its engine down as the
interpreter ends: up to OWNER_SECONDS) and stops every marked process still there (SIGTERM, SIGKILL after
GRACE_SECONDS).

  Ctrl-C            each command's own path (KeyboardInterrupt): vLLM's server gets SIGINT and is waited for
  SIGTERM, SIGHUP   the same, as Stopped (a KeyboardInterrupt): what systemd, Docker and `kill` send, a closed
                    terminal (before, Python's default ended trainctl on the spot and left vLLM's server running)
  SIGKILL           the children trainctl asked for it get their parent-death signal (the kernel), and the watchdog
                    stops the rest (vLLM's EngineCore outlived the SIGKILL of its API server: measured)

A command that starts something meant to outlive it (`trainctl serve`'s jobs, detached as `train --detach` is;
its merges and evals, which end with the server by their own parent-death signal) starts it without the mark
(unmarked()).

    python -m trainctl.launchers.tether MARK OWNER_PID    the watchdog (started by held())
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

from trainctl.launchers.tree import MARK_VAR, new_mark, stop_marked

# how long a process the watchdog sent SIGTERM has before SIGKILL: vLLM's EngineCore took 2-7 s to end on SIGTERM
GRACE_SECONDS = 5.0
# how long the watchdog waits, once the pipe closed, for the command's process to end by itself (a command run in a
# longer-lived process, as the tests' in-process CLI, leaves held() without ending)
OWNER_SECONDS = 3.0
# what systemd and friends send, and what a closing terminal does: both end the command as Ctrl-C does
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where Ctrl-C's KeyboardInterrupt would be: every path that stops what a command
    started on Ctrl-C runs for them too."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_stopped(signum, frame) -> None:
    from trainctl.launchers.supervisor import detach_from_terminal

    for sig in STOP_SIGNALS:  # a second signal while stopping does not cut the stop short
        signal.signal(sig, signal.SIG_IGN)
    if signum == signal.SIGHUP:
        detach_from_terminal()  # what the command still says goes nowhere, instead of failing half-way (EIO)
    raise Stopped(signum)


# the block held() is in: its mark, the process that entered it, and its watchdog once one was needed (False: it
# could not be started)
_held: dict = {"mark": None, "pid": None, "watchdog": None}
_lock = threading.RLock()
_hooked = False
# the audit events that start a process (CPython's); the watchdog's own start raises one too, inside watch()
_STARTS = frozenset({"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system"})


def _on_audit(event: str, args) -> None:
    if event in _STARTS and _held["watchdog"] is None and _held["mark"] is not None:
        watch()


def watch() -> None:
    """Inside held(): start the watchdog now, if it is not running (before a process that may start others in a
    way no audit event shows: multiprocessing's spawn)."""
    with _lock:
        # only the process that entered the block: one forked inside it inherits this state (os.fork's audit event
        # started the watchdog in the parent first), and a watchdog of its own would stop the command's processes
        # when it, not the command, ended
        if _held["mark"] is None or _held["watchdog"] is not None or _held["pid"] != os.getpid():
            return
        _held["watchdog"] = False  # the start below raises an audit event of its own
        _held["watchdog"] = _start_watchdog(_held["mark"]) or False


@contextlib.contextmanager
def held() -> Iterator[str]:
    """Everything started inside ends with this process, or when the block is left (see the module's docstring);
    yields the mark. In the main thread, SIGTERM and SIGHUP raise Stopped inside the block."""
    global _hooked
    mark = new_mark()
    before = os.environ.get(MARK_VAR)
    os.environ[MARK_VAR] = mark
    with _lock:
        outer = dict(_held)
        _held.update(mark=mark, pid=os.getpid(), watchdog=None)
        if not _hooked:  # once a process: audit hooks cannot be removed, and this one does nothing outside held()
            sys.addaudithook(_on_audit)
            _hooked = True
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            handlers[sig] = signal.signal(sig, _raise_stopped)
    try:
        yield mark
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        if before is None:
            os.environ.pop(MARK_VAR, None)
        else:
            os.environ[MARK_VAR] = before
        with _lock:
            watchdog = _held["watchdog"]
            _held.update(outer)
        if watchdog:
            with contextlib.suppress(OSError):
                watchdog.stdin.close()  # the watchdog stops what is left, and exits
            with contextlib.suppress(subprocess.TimeoutExpired):
                watchdog.wait(timeout=0.1)  # reaped now if it is quick; else init reaps it (its own session)


def unmarked(env: dict[str, str] | None = None) -> dict[str, str]:
    """An environment (os.environ's by default) without the mark: for a process meant to outlive the command."""
    return {k: v for k, v in (os.environ if env is None else env).items() if k != MARK_VAR}


def _start_watchdog(mark: str) -> subprocess.Popen | None:
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "trainctl.launchers.tether", mark, str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=unmarked(),  # it must not stop itself
            start_new_session=True,  # out of the terminal's reach, and of a signal to this process group
            close_fds=True,
        )
    except OSError:
        return None  # the command goes on; only a SIGKILL of it would then leave processes


def main(argv: list[str]) -> int:
    import time

    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)  # only the pipe decides
    mark, owner = argv[0], int(argv[1])
    while sys.stdin.buffer.read1(64):
        pass
    deadline = time.monotonic() + OWNER_SECONDS
    while os.getppid() == owner and time.monotonic() < deadline:  # its parent until it ends
        time.sleep(0.05)
    stop_marked(mark, grace=GRACE_SECONDS, deadline=GRACE_SECONDS + 10)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
