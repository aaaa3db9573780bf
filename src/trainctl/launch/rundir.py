"""The run folder: everything needed to understand, repeat and resume a run.

runs/<name>/
  trainctl.yaml        the resolved trainctl config (secrets redacted)
  <backend>.yaml       the backend's config as the trainer reads it (verl_ppo.yaml, verl_sft.yaml, trl_dpo.yaml)
  command.sh           the exact launch, re-runnable; the equivalent raw backend command in a comment
  lock.json            versions (trainctl, verl, torch, transformers, trl, ray, Python) and the config's git commit
  run.json             the run's status file (below)
  logs/attempt-N.log   each attempt's output
  metrics/attempt-N.jsonl  metrics per step ({"step": N, "data": {...}}, verl's file-logger format), whatever the logger
  checkpoints/

run.json, the one status file of a run (RunDir writes it; trainctl.runs reads it):
  name, algorithm, family, backend, config_file, model, data, args, created
  state     created | running | finished | failed | interrupted | submitted (a Ray job not followed)
  attempts  one per launch: n, started, ended, launcher, log, metrics, steps_total (expected), state, exit_code,
            seconds; a Ray job's job_id, address, job_status, message
  live      while an attempt runs here: the supervising trainctl's pid and pid_started (its start time, so a reused
            PID is not mistaken for it), trainer_pid, host, and heartbeat (epoch seconds), refreshed every
            HEARTBEAT_SECONDS. A run whose state says running but whose supervisor is gone was killed.
"""

from __future__ import annotations

import json
import os
import shlex
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

from trainctl.ckpt.lineage import OTHER_MODELS
from trainctl.launch.lock import lockfile
from trainctl.paths import atomic_write_text
from trainctl.secrets import Redactor

if TYPE_CHECKING:
    from trainctl.backends.base import Command
    from trainctl.plan import Plan

RUN_FILE = "run.json"
# how often a supervising trainctl refreshes run.json's heartbeat while its run is alive
HEARTBEAT_SECONDS = 5.0


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


@dataclass
class RunDir:
    path: Path

    @property
    def run_file(self) -> Path:
        return self.path / RUN_FILE

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    def exists(self) -> bool:
        return self.run_file.is_file()

    def status(self) -> dict:
        return json.loads(self.run_file.read_text())

    def _save_status(self, status: dict) -> None:
        atomic_write_text(self.run_file, json.dumps(status, indent=2) + "\n")

    # -- writing ------------------------------------------------------------------------------------------------

    def write_config(self, plan: Plan, args: list[str]) -> None:
        """The run's configs, lockfile and status, before anything starts."""
        redact = Redactor()
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / "logs").mkdir(exist_ok=True)
        (self.path / "metrics").mkdir(exist_ok=True)
        tree = redact.tree(plan.trainctl_tree())
        atomic_write_text(self.path / "trainctl.yaml", OmegaConf.to_yaml(OmegaConf.create(tree)))
        backend = redact.tree(OmegaConf.to_container(plan.backend_cfg, resolve=True))
        atomic_write_text(self.path / plan.backend.config_file, OmegaConf.to_yaml(OmegaConf.create(backend)))
        folders = [*plan.comp.search.user_dirs, Path.cwd()]
        lock = lockfile(folders)
        if plan.lineage is not None:
            lock["lineage"] = plan.lineage.to_json()  # where the model it trains came from (model=runs/NAME)
        for other in OTHER_MODELS:  # the runs that trained its reward model, its teacher
            if other.key in plan.other_lineages:
                lock[other.lock_key] = plan.other_lineages[other.key].to_json()
        atomic_write_text(self.path / "lock.json", json.dumps(lock, indent=2) + "\n")
        previous = self.status() if self.exists() else {}
        self._save_status(
            {
                "name": plan.cfg.run.name,
                "algorithm": plan.cfg.algorithm.name,
                "family": plan.cfg.family,
                "backend": plan.backend.name,
                "config_file": plan.backend.config_file,
                "model": plan.cfg.model.name,
                "data": plan.cfg.data.name,
                "args": [redact.text(a) for a in args],
                "created": previous.get("created", _now()),
                "state": "created",
                "attempts": previous.get("attempts", []),
            }
        )

    def write_command(self, plan: Plan, command: Command, args: list[str]) -> None:
        redact = Redactor()
        env = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in command.env.items())
        argv = " ".join(shlex.quote(a) for a in command.argv)
        raw = " ".join(shlex.quote(redact.text(a)) for a in command.raw_argv)
        if command.raw_argv:
            alone = f"# The same run with {plan.backend.title} alone (its defaults plus these overrides):\n# {raw}\n"
        else:
            alone = "".join(f"# {line}\n" for line in textwrap.wrap(command.raw_note, 116))
        text = (
            "#!/usr/bin/env bash\n"
            "# Re-runs this run's trainer exactly as trainctl launched it. Written by trainctl.\n"
            f"# trainctl command: trainctl train {' '.join(shlex.quote(redact.text(a)) for a in args)}\n"
            "# Secrets (HF_TOKEN, WANDB_API_KEY, ...) are read from your environment, never stored here.\n"
            "set -euo pipefail\n"
            f"{env}"
            f"exec {argv}\n"
            "\n"
            f"{alone}"
        )
        path = self.path / "command.sh"
        atomic_write_text(path, text)
        path.chmod(0o755)

    # -- attempts -----------------------------------------------------------------------------------------------

    def start_attempt(self, launcher: str, **extra: Any) -> dict:
        """Record a new attempt started by `launcher`, and the run as running."""
        status = self.status()
        n = len(status["attempts"]) + 1
        attempt = {
            "n": n,
            "started": _now(),
            "launcher": launcher,
            "log": f"logs/attempt-{n}.log",
            "metrics": f"metrics/attempt-{n}.jsonl",
            **extra,
        }
        status["attempts"].append(attempt)
        status["state"] = "running"
        self._save_status(status)
        return attempt

    def set_state(self, state: str) -> None:
        status = self.status()
        status["state"] = state
        self._save_status(status)

    def update_attempt(self, **fields: Any) -> None:
        status = self.status()
        status["attempts"][-1].update(fields)
        self._save_status(status)

    def finish_attempt(self, state: str, exit_code: int | None, **fields: Any) -> None:
        status = self.status()
        status["attempts"][-1].update(ended=_now(), exit_code=exit_code, state=state, **fields)
        status["state"] = state
        status.pop("live", None)
        self._save_status(status)

    # -- liveness -----------------------------------------------------------------------------------------------

    def lock(self) -> RunLock:
        """Take the run's lock (the run folder is made if needed), or refuse: another trainctl supervises this run.

        An flock on the folder: the kernel releases it when its holder ends, however it ends, so a killed trainctl
        never leaves a stale lock behind."""
        import fcntl

        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            from trainctl.errors import TrainctlError

            live = (self.status().get("live") or {}) if self.exists() else {}
            who = f"trainctl (PID {live['pid']})" if live.get("pid") else "another trainctl"
            raise TrainctlError(
                f"{relative(self.path)} is in use: {who} is running it.",
                hint=f"follow it: trainctl runs show {relative(self.path)} --follow; stop it: trainctl runs stop "
                f"{relative(self.path)}; or start another: run.name={self.path.name}-2",
            ) from None
        return RunLock(fd)

    def locked(self) -> bool:
        """Whether a trainctl on this machine holds the run's lock now."""
        import fcntl

        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # closing drops a lock taken just now

    def set_live(self, trainer_pid: int | None = None) -> None:
        """This process supervises the run now: record it, with the first heartbeat."""
        import socket

        import psutil

        me = psutil.Process()
        status = self.status()
        status["live"] = {
            "pid": me.pid,
            "pid_started": me.create_time(),
            "trainer_pid": trainer_pid,
            "host": socket.gethostname(),
            "heartbeat": time.time(),
        }
        self._save_status(status)
        self._last_beat = time.monotonic()

    def beat(self) -> None:
        """Refresh the heartbeat (at most every HEARTBEAT_SECONDS; cheap to call often)."""
        if time.monotonic() - getattr(self, "_last_beat", 0.0) < HEARTBEAT_SECONDS:
            return
        self._last_beat = time.monotonic()
        status = self.status()
        if "live" in status:
            status["live"]["heartbeat"] = time.time()
            self._save_status(status)

    def log_path(self, attempt: dict) -> Path:
        return self.path / attempt["log"]

    def metrics_path(self, attempt: dict) -> Path:
        return self.path / attempt["metrics"]


def has_checkpoints(folder: Path) -> bool:
    return folder.is_dir() and any(folder.iterdir())


def relative(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


@dataclass
class RunLock:
    fd: int

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
