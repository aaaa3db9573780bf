"""Supervising a local training process: stream its output, stop it cleanly, leave nothing behind.

The trainer runs in its own session (Ctrl-C reaches trainctl, which decides what to do). trainctl makes itself a
child subreaper (Linux), so processes that detach from the trainer (Ray's gcs_server and raylet, torchrun's
workers) are re-parented to trainctl instead of init and can still be found and stopped, by PID, when the run
ends. Nothing else on the machine is touched: only processes that descend from this run.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from trainctl.secrets import Redactor

PR_SET_CHILD_SUBREAPER = 36
GRACE_SECONDS = 15.0
# how often the process tree is sampled; what detaches (Ray's daemons) lives for the whole run
WATCH_SECONDS = 2.0


def become_subreaper() -> bool:
    """Adopt orphaned descendants (Linux prctl); harmless where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


@dataclass
class Outcome:
    exit_code: int
    interrupted: int | None = None  # the signal that stopped the run, if one did
    seconds: float = 0.0
    tail: list[str] = field(default_factory=list)
    leftovers_killed: int = 0


class Supervisor:
    """Runs one command to completion, streaming its output to the terminal and a log file."""

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        log_path: Path,
        echo=None,
        tail_lines: int = 40,
        on_start: Callable[[int], None] | None = None,
        on_tick: Callable[[], None] | None = None,
    ):
        """`on_start(pid)` is called once the trainer started, `on_tick()` about twice a second while it runs (both
        on the calling thread: the run folder's heartbeat); a failure in either never stops the supervision."""
        self.on_start = on_start
        self.on_tick = on_tick
        self.argv = argv
        self.env = env
        self.log_path = log_path
        self.echo = echo if echo is not None else sys.stdout
        self.redact = Redactor(env)
        self.tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self._interrupted: int | None = None
        self._seen: set[int] = set()
        self._proc: subprocess.Popen | None = None

    # -- output ---------------------------------------------------------------------------------------------------

    def _pump(self, stream, log) -> None:
        pending = b""
        while True:
            chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
            if not chunk:
                break
            pending += chunk
            # complete lines (\n or the \r of progress bars) are redacted and written; the rest waits
            cut = max(pending.rfind(b"\n"), pending.rfind(b"\r"))
            if cut < 0:
                continue
            text = self.redact.text(pending[: cut + 1].decode("utf-8", errors="replace"))
            pending = pending[cut + 1 :]
            self._emit(text, log)
        if pending:
            self._emit(self.redact.text(pending.decode("utf-8", errors="replace")), log)

    def _emit(self, text: str, log) -> None:
        log.write(text)
        log.flush()
        try:
            self.echo.write(text)
            self.echo.flush()
        except (OSError, ValueError):
            pass  # the terminal went away: the log still has everything
        for line in text.replace("\r", "\n").split("\n"):
            if line.strip():
                self.tail.append(line)

    # -- processes -------------------------------------------------------------------------------------------------

    def _watch(self) -> None:
        """Remember every descendant of the trainer while it runs (they may detach later)."""
        while self._proc is not None and self._proc.poll() is None:
            try:
                for p in psutil.Process(self._proc.pid).children(recursive=True):
                    self._seen.add(p.pid)
            except psutil.Error:
                pass
            time.sleep(WATCH_SECONDS)

    def _on_signal(self, signum, frame) -> None:
        if self._interrupted is None:
            self._interrupted = signum
            self._signal_group(signal.SIGTERM)

    def _signal_group(self, sig: int) -> None:
        if self._proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, sig)

    def _leftovers(self, before: set[int]) -> list[psutil.Process]:
        """Processes of this run still alive: what we saw descend from it, and orphans adopted since."""
        me = psutil.Process()
        candidates = {p.pid: p for p in me.children(recursive=True) if p.pid not in before}
        for pid in self._seen:
            if pid not in candidates and psutil.pid_exists(pid):
                with contextlib.suppress(psutil.Error):
                    candidates[pid] = psutil.Process(pid)
        alive = []
        for p in candidates.values():
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.Error:
                pass
        return alive

    def _cleanup(self, before: set[int]) -> int:
        self._signal_group(signal.SIGTERM)
        procs = self._leftovers(before)
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.terminate()
        _, alive = psutil.wait_procs(procs, timeout=5)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(alive, timeout=5)
        self._signal_group(signal.SIGKILL)
        # reap adopted zombies
        for p in psutil.Process().children():
            if p.pid not in before:
                with contextlib.suppress(psutil.Error):
                    p.wait(timeout=0.1)
        return len(procs)

    @staticmethod
    def _callback(fn, *args) -> None:
        if fn is None:
            return
        # the status file could not be written (disk full, folder removed): the run goes on
        with contextlib.suppress(OSError, ValueError):
            fn(*args)

    # -- the run ---------------------------------------------------------------------------------------------------

    def run(self) -> Outcome:
        become_subreaper()
        before = {p.pid for p in psutil.Process().children(recursive=True)}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        handlers = {}
        start = time.monotonic()
        with open(self.log_path, "a", encoding="utf-8") as log:
            self._proc = subprocess.Popen(
                self.argv,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            if threading.current_thread() is threading.main_thread():
                for sig in (signal.SIGINT, signal.SIGTERM):
                    handlers[sig] = signal.signal(sig, self._on_signal)
            watcher = threading.Thread(target=self._watch, daemon=True)
            watcher.start()
            pump = threading.Thread(target=self._pump, args=(self._proc.stdout, log), daemon=True)
            pump.start()
            self._callback(self.on_start, self._proc.pid)
            try:
                deadline = None
                while True:
                    try:
                        code = self._proc.wait(timeout=0.5)
                        break
                    except subprocess.TimeoutExpired:
                        pass
                    self._callback(self.on_tick)
                    if self._interrupted is not None:
                        deadline = deadline or time.monotonic() + GRACE_SECONDS
                        if time.monotonic() > deadline:
                            self._signal_group(signal.SIGKILL)
            finally:
                for sig, handler in handlers.items():
                    signal.signal(sig, handler)
            pump.join(timeout=10)
            killed = self._cleanup(before)
        if code < 0:
            code = 128 - code
        return Outcome(
            exit_code=code,
            interrupted=self._interrupted,
            seconds=time.monotonic() - start,
            tail=list(self.tail),
            leftovers_killed=killed,
        )
