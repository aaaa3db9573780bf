"""Runs started in the background and stopped from anywhere: `train --detach`, `runs stop` (and the server).

A detached run is the same `trainctl train` command a user would type, started in a session of its own with no
terminal: that trainctl supervises the run as it would in the foreground (its output goes to the run's
logs/supervisor.log), and closing the terminal that started it changes nothing.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from trainctl import launchers
from trainctl.errors import TrainctlError
from trainctl.launch.rundir import RunDir, relative

SUPERVISOR_LOG = "logs/supervisor.log"
# how long `train --detach` waits for the background trainctl to start its trainer (it plans again: a few seconds)
START_WAIT_SECONDS = 180.0


@dataclass
class Detached:
    run_dir: Path
    pid: int  # the supervising trainctl
    trainer_pid: int | None
    attempt: int


def start_detached(train_args: list[str], run_dir: Path, env: dict[str, str] | None = None) -> Detached:
    """Start `trainctl train TRAIN_ARGS` in the background and return once its trainer runs (or raise with the end
    of its output if it stopped first)."""
    from trainctl.launchers.tether import unmarked

    run = RunDir(run_dir)
    before = len(run.status()["attempts"]) if run.exists() else 0
    run.path.mkdir(parents=True, exist_ok=True)
    log_path = run.path / SUPERVISOR_LOG
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"--- trainctl train {' '.join(train_args)} (detached, {time.strftime('%Y-%m-%d %H:%M:%S')})\n")
        log.flush()
        proc = subprocess.Popen(
            [sys.executable, "-m", "trainctl", "train", *train_args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            # not one of the processes of the command that starts it (trainctl.launchers.tether): it outlives it
            env={**unmarked(env), "TRAINCTL_DETACHED": "1"},
            start_new_session=True,  # no terminal: a closed one sends it nothing
        )
    # reaped when it ends, whenever that is: a long-lived caller (trainctl serve) kept each ended one as a zombie
    threading.Thread(target=proc.wait, name=f"reap-{proc.pid}", daemon=True).start()
    deadline = time.monotonic() + START_WAIT_SECONDS
    while time.monotonic() < deadline:
        code = proc.poll()
        status = _status(run)
        attempts = status.get("attempts") or []
        live = status.get("live") or {}
        if len(attempts) > before and (live.get("trainer_pid") or attempts[-1].get("job_id")):
            return Detached(run.path, proc.pid, live.get("trainer_pid"), attempts[-1]["n"])
        if code is not None:
            if len(attempts) > before and attempts[-1].get("ended"):
                return Detached(run.path, proc.pid, None, attempts[-1]["n"])  # it was quick
            tail = log_path.read_text(errors="replace").splitlines()[-15:]
            raise TrainctlError(
                f"the background trainctl stopped before its trainer started (exit {code}):",
                details=["  " + line for line in tail],
                hint=f"its whole output: {relative(log_path)}",
            )
        time.sleep(0.25)
    raise TrainctlError(
        f"the background trainctl (PID {proc.pid}) did not start its trainer within {START_WAIT_SECONDS:.0f} s.",
        hint=f"see {relative(log_path)}; stop it: trainctl runs stop {relative(run.path)}",
    )


def _status(run: RunDir) -> dict:
    try:
        return run.status()
    except (OSError, ValueError):
        return {}  # not written yet, or being replaced


def stop_run(path: Path, grace: float) -> str:
    """Stop a run however it was launched (its last attempt's launcher decides how)."""
    run = RunDir(Path(path))
    status = run.status()
    last = status["attempts"][-1] if status.get("attempts") else {}
    return launchers.get(last.get("launcher") or "local").stop(run, grace)


def run_logs(path: Path, attempt: int | None = None) -> str:
    """An attempt's output (the last one by default), from wherever its launcher keeps it."""
    run = RunDir(Path(path))
    attempts = run.status().get("attempts") or []
    if not attempts:
        raise TrainctlError(f"{relative(run.path)} has no attempt yet.")
    chosen = attempts[-1] if attempt is None else next((a for a in attempts if a["n"] == attempt), None)
    if chosen is None:
        raise TrainctlError(f"{relative(run.path)} has no attempt {attempt}.", hint=f"attempts: 1-{attempts[-1]['n']}")
    return launchers.get(chosen.get("launcher") or "local").logs(run.path, chosen)
