"""Supervising a local training process: stream its output, stop it cleanly, leave nothing behind.

The trainer runs in its own session (Ctrl-C reaches trainctl, which decides what to do). trainctl makes itself a
child subreaper (Linux), so processes that detach from the trainer (Ray's gcs_server and raylet, torchrun's
workers) are re-parented to trainctl instead of init and can still be found and stopped, by PID, when the run
ends. Every process of the attempt also carries its mark (trainctl.launchers.tree), which finds them whoever their
parent is. Nothing else on the machine is touched: only processes that descend from this run.

However trainctl ends, the run ends with it:
  SIGINT, SIGTERM  the trainer's process group gets SIGTERM, then SIGKILL after GRACE_SECONDS; the attempt is
                   interrupted
  SIGHUP           (the terminal closed: a tmux pane, an SSH session) the same, recorded as "terminal closed"
  SIGKILL          nothing runs in trainctl any more: the trainer gets SIGTERM from the kernel (PR_SET_PDEATHSIG),
                   and the attempt's watchdog (trainctl.launch.watchdog), whose pipe from trainctl closes, stops
                   every marked process and records the attempt as killed

And however the run goes wrong inside, it ends: with `vitals` (trainctl.launchers.vitals), a process the trainer
depends on that dies or stays stopped, or a run that stops stepping, ends the run with a Fault for its verdict.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from trainctl.launchers.tree import MARK_VAR, marked, new_mark, terminate
from trainctl.launchers.vitals import ENDED_BY_RUN, Fault, Vitals
from trainctl.secrets import Redactor

DONE = b"done"  # what a supervisor that ends normally tells its watchdog (trainctl.launch.watchdog)
PR_SET_CHILD_SUBREAPER = 36
PR_SET_PDEATHSIG = 1
GRACE_SECONDS = 15.0
# how long the trainer's output is read after it exits before its leftovers are stopped
DRAIN_SECONDS = 1.0
# how often the process tree is sampled; what detaches (Ray's daemons) lives for the whole run. Often enough to see a
# process die before the trainer, failing for it, ends the rest (1-2 s after a rollout server's SIGKILL, measured)
WATCH_SECONDS = 0.5


def _libc():
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def parent_death_signal(sig: int) -> Callable[[], None] | None:
    """A preexec_fn that makes the kernel send `sig` to the child when this process ends (Linux), or None.

    The libc function is looked up here, in the parent: the child, forked while other threads may hold locks, only
    calls it (an async-signal-safe system call) and checks that its parent did not end before the call.
    """
    if not sys.platform.startswith("linux"):
        return None
    libc = _libc()
    prctl = getattr(libc, "prctl", None)
    if prctl is None:
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:  # the parent ended between fork and prctl: the signal would never come
            os.kill(os.getpid(), sig)

    return preexec


def detach_from_terminal() -> None:
    """The terminal is gone (SIGHUP): what this process still writes (the live view's last frame, the final
    message) goes nowhere, instead of failing with EIO half-way through the cleanup."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        for fd in (1, 2):
            os.dup2(null, fd)
        os.close(null)
    except OSError:
        pass


def become_subreaper() -> bool:
    """Adopt orphaned descendants (Linux prctl); harmless where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


# why a run was interrupted, by the signal trainctl got
REASONS = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "terminal closed"}


@dataclass
class Outcome:
    exit_code: int
    interrupted: int | None = None  # the signal that stopped the run, if one did
    seconds: float = 0.0
    tail: list[str] = field(default_factory=list)
    leftovers_killed: int = 0
    fault: Fault | None = None  # what failed inside the run, when trainctl saw it (trainctl.launchers.vitals)


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
        mark: str | None = None,
        watchdog: tuple[Path, int] | None = None,
        vitals: Vitals | None = None,
    ):
        """`on_start(pid)` is called once the trainer started, `on_tick()` about twice a second while it runs (both
        on the calling thread: the run folder's heartbeat); a failure in either never stops the supervision.
        `mark` goes into the trainer's environment (trainctl.launchers.tree); with `watchdog=(run folder, attempt)` a
        watchdog stops the marked processes if this process is killed."""
        self.on_start = on_start
        self.on_tick = on_tick
        self.argv = argv
        self.mark = mark or new_mark()
        self.env = {**env, MARK_VAR: self.mark}
        self.watchdog = watchdog
        self.log_path = log_path
        self.echo = echo if echo is not None else sys.stdout
        self.redact = Redactor(env)
        self.tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self._interrupted: int | None = None
        self._seen: set[int] = set()
        self._proc: subprocess.Popen | None = None
        self.vitals = vitals
        self._fault: Fault | None = None  # the fault trainctl ended the run for
        self._first_traceback: float | None = None  # when the trainer began to fail (its first traceback)

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
                if self._first_traceback is None and "Traceback (most recent call last)" in line:
                    self._first_traceback = time.time()

    # -- processes -------------------------------------------------------------------------------------------------

    def _watch(self) -> None:
        """Remember every descendant of the trainer while it runs (they may detach later), and take the vitals of
        those the run depends on."""
        while self._proc is not None and self._proc.poll() is None:
            try:
                procs = psutil.Process(self._proc.pid).children(recursive=True)
                self._seen.update(p.pid for p in procs)
                if self.vitals is not None and self._interrupted is None and self._fault is None:
                    self.vitals.sample(procs, trainer=psutil.Process(self._proc.pid))
            except psutil.Error:
                pass
            time.sleep(WATCH_SECONDS)

    def _verdict(self, code: int) -> Fault | None:
        """The fault the run failed for, as trainctl saw it: the one it ended the run for, or the first death (or
        stop) it saw before the trainer began to fail, or one the trainer's last lines name by PID."""
        if self._fault is not None:
            return self._fault
        if self.vitals is None or code == 0 or self._interrupted is not None:
            return None
        said = "\n".join(self.tail)
        deaths = [f for f in self.vitals.faults if f.kind != "stall"]
        if code == 128 + signal.SIGKILL and not any(f.oom for f in deaths):
            trainer = self.vitals.trainer_oom()  # the kernel's OOM killer chose the trainer itself
            if trainer is not None:
                return trainer
        # Ray's ActorDiedError names the PID of the actor whose death failed the trainer, on a line of its own ("pid=N"
        # in Ray's log prefixes is only who printed a line)
        named = [f for f in deaths if f.pid and re.search(rf"^\s*pid: {f.pid}\s*$", said, re.M)]
        if named:
            return named[0]
        # else one seen before the trainer began to fail (the processes a failing trainer ends go after it); of those
        # seen gone at once, the one the others depend on least (an engine before Ray's own daemons)
        first = self._first_traceback
        early = [f for f in deaths if f.name not in ENDED_BY_RUN and (first is None or f.at <= first + WATCH_SECONDS)]
        return min(early, key=lambda f: (f.at, f.rank)) if early else None

    def _on_signal(self, signum, frame) -> None:
        if signum == signal.SIGHUP:
            detach_from_terminal()
        if self._interrupted is None:
            self._interrupted = signum
            self._signal_group(signal.SIGTERM)

    def _start_watchdog(self, trainer_pid: int) -> subprocess.Popen | None:
        if self.watchdog is None:
            return None
        run_dir, attempt = self.watchdog
        argv = [sys.executable, "-m", "trainctl.launch.watchdog", str(run_dir), str(attempt), self.mark]
        env = {k: v for k, v in self.env.items() if k != MARK_VAR}
        try:
            return subprocess.Popen(
                [*argv, str(os.getpid()), str(trainer_pid)],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # out of the terminal's reach: it must outlive a closed one
            )
        except OSError:
            return None  # the run goes on; only a SIGKILL of trainctl would then leave processes

    @staticmethod
    def _dismiss(watchdog: subprocess.Popen | None) -> None:
        if watchdog is None:
            return
        with contextlib.suppress(OSError, ValueError):
            watchdog.stdin.write(DONE)
            watchdog.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            watchdog.wait(timeout=5)

    def _stop_group(self) -> None:
        """SIGTERM to the trainer's process group, SIGKILL after GRACE_SECONDS."""
        self._signal_group(signal.SIGTERM)
        self._signal_group(signal.SIGCONT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=GRACE_SECONDS)
            return
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=5)

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
        self._signal_group(signal.SIGCONT)  # a stopped process acts on its SIGTERM once continued (tree.terminate)
        procs = self._leftovers(before)
        known = {p.pid for p in procs}
        procs += [p for p in marked(self.mark) if p.pid not in known]
        for p in procs:
            terminate(p)
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
            if threading.current_thread() is threading.main_thread():
                # before the trainer starts: a signal in its first moments (it may have written its first output
                # already) interrupts the run, rather than ending trainctl by the signal's default action with the
                # run unrecorded (seen under load: a SIGHUP right after the trainer's start, before these were set)
                for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                    handlers[sig] = signal.signal(sig, self._on_signal)
            try:
                self._proc = subprocess.Popen(
                    self.argv,
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=parent_death_signal(signal.SIGTERM),
                )
            except OSError as e:  # not there, or not executable: as a shell says it, with its exit code
                for sig, handler in handlers.items():
                    signal.signal(sig, handler)
                code = 127 if isinstance(e, FileNotFoundError) else 126
                why = "command not found" if code == 127 else (e.strerror or str(e))
                self._emit(f"trainctl: {self.argv[0]}: {why}\n", log)
                return Outcome(exit_code=code, seconds=time.monotonic() - start, tail=list(self.tail))
            if self._interrupted is not None:  # it came while the trainer was starting: pass it on
                self._signal_group(signal.SIGTERM)
            watchdog = self._start_watchdog(self._proc.pid)
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
                    if self.vitals is not None and self._interrupted is None and self._fault is None:
                        self._fault = self.vitals.due()
                        if self._fault is not None:  # the trainer waits for what cannot come: it is ended
                            self._fault.ended_by_trainctl = True
                            self._signal_group(signal.SIGTERM)
                    if self._interrupted is not None or self._fault is not None:
                        deadline = deadline or time.monotonic() + GRACE_SECONDS
                        if time.monotonic() > deadline:
                            self._signal_group(signal.SIGKILL)
            except BaseException:
                # trainctl failed while the trainer ran (a callback's error, an exception raised by a signal handler
                # not its own, as a test harness's timeout): the trainer goes with it, never left training alone
                self._stop_group()
                self._cleanup(before | ({watchdog.pid} if watchdog else set()))
                self._dismiss(watchdog)
                raise
            finally:
                for sig, handler in handlers.items():
                    signal.signal(sig, handler)
            # what the trainer wrote last is read before its leftovers are stopped; a leftover that inherited the
            # pipe (a daemon, as Ray's are) would keep it open, so the pump is not waited for until they are gone
            pump.join(timeout=DRAIN_SECONDS)
            # the watchdog is not a leftover: it ignores SIGTERM, and it is dismissed once the rest is gone
            killed = self._cleanup(before | ({watchdog.pid} if watchdog else set()))
            pump.join(timeout=10)
            self._dismiss(watchdog)
        if code < 0:
            code = 128 - code
        return Outcome(
            exit_code=code,
            interrupted=self._interrupted,
            seconds=time.monotonic() - start,
            tail=list(self.tail),
            leftovers_killed=killed,
            fault=self._verdict(code),
        )
