"""Slurm's commands, for the slurm launcher (trainctl.launchers.slurm): the cluster's partitions and nodes, the
jobs it knows, cancelling one. Every command goes through slurm(), which turns a missing command, a timeout or a
refusal into one clear error.
"""

from __future__ import annotations

import contextlib
import re
import shlex
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainctl.errors import TrainctlError

COMMANDS = ("sbatch", "squeue", "scontrol", "scancel", "sinfo")
INSTALL_HINT = (
    "run trainctl where Slurm's commands are (a login node of the cluster), or install its client: "
    "apt-get install slurm-client (Debian, Ubuntu)"
)
# how long answers about jobs are shared (one query for every run listed)
POLL_SECONDS = 2.0
# how long a cancelled job may take to end its processes beyond the cluster's KillWait
KILL_MARGIN = 15.0

QUEUED = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SUSPENDED"}
RUNNING = {"RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING", "RESIZING"}


def missing_commands() -> list[str]:
    import shutil

    return [c for c in COMMANDS if shutil.which(c) is None]


def slurm(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> str:
    """Run one of Slurm's commands; its stdout, or a TrainctlError with what it said."""
    try:
        done = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, env=env)
    except FileNotFoundError:
        raise TrainctlError(f"Slurm's {args[0]} is not on the PATH.", hint=INSTALL_HINT) from None
    except subprocess.TimeoutExpired:
        raise TrainctlError(
            f"`{shlex.join(args)}` did not answer within {timeout:.0f} s.", hint="is slurmctld up? try: sinfo"
        ) from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise TrainctlError(f"`{shlex.join(args)}` failed: {said[-1] if said else f'exit {done.returncode}'}")
    return done.stdout


def records(text: str) -> list[dict[str, str]]:
    """`scontrol show ... -o` output: one record a line, KEY=VALUE words."""
    out = []
    for line in text.splitlines():
        fields: dict[str, str] = {}
        for word in line.split():
            key, sep, value = word.partition("=")
            if sep:
                fields[key] = value
        if fields:
            out.append(fields)
    return out


_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def minutes(value: Any) -> float | None:
    """A Slurm time limit in minutes: MINUTES, MINUTES:SECONDS, HH:MM:SS, DAYS-HH[:MM[:SS]]; UNLIMITED is None.
    ValueError for anything else."""
    text = str(value).strip()
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    m = _TIME.match(text)
    if not m:
        raise ValueError(text)
    days, a, b, c = m.groups()
    if days is not None:  # DAYS-HH[:MM[:SS]]
        return int(days) * 1440 + int(a) * 60 + int(b or 0) + int(c or 0) / 60
    if c is not None:  # HH:MM:SS
        return int(a) * 60 + int(b) + int(c) / 60
    return int(a) + int(b or 0) / 60  # MINUTES[:SECONDS]


def partition(name: str | None) -> dict[str, str]:
    """The partition's settings (the default one for None); an error naming the partitions there are."""
    found = records(slurm("scontrol", "show", "partition", "-o"))
    for p in found:
        if p.get("PartitionName") == name or (name is None and p.get("Default") == "YES"):
            return p
    names = ", ".join(p.get("PartitionName", "?") for p in found) or "none"
    if name is None:
        raise TrainctlError(f"the Slurm cluster has no default partition (partitions: {names}).")
    raise TrainctlError(
        f"hardware.slurm.partition = {name!r}: the Slurm cluster has no such partition (partitions: {names}).",
        hint=f"hardware.slurm.partition={found[0]['PartitionName']}" if found else "sinfo lists them",
    )


def partition_nodes(part: dict[str, str]) -> list[dict[str, str]]:
    names = set(slurm("scontrol", "show", "hostnames", part.get("Nodes", "")).split()) if part.get("Nodes") else set()
    return [n for n in records(slurm("scontrol", "show", "node", "-o")) if n.get("NodeName") in names]


def gpus(node: dict[str, str]) -> int:
    """GPUs a node's Gres says it has (gpu:8, gpu:a100:4(S:0-1), ...)."""
    total = 0
    for part in (node.get("Gres") or "").split(","):
        bits = part.split("(")[0].split(":")
        if bits[0] == "gpu" and bits[-1].isdigit():
            total += int(bits[-1])
    return total


@dataclass
class JobState:
    state: str  # Slurm's: PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, ...
    reason: str = ""
    exit_code: int | None = None
    signal: int | None = None
    nodes: str = ""
    end: float | None = None  # epoch seconds, once it ended

    @property
    def ended(self) -> bool:
        return self.state not in QUEUED | RUNNING


_JOBS: dict[str, JobState] = {}
_JOBS_AT = [0.0]
_LOCK = threading.Lock()


def jobs(fresh: bool = False) -> dict[str, JobState]:
    """Every job Slurm knows now (queued, running, or ended within its MinJobAge), by id: one query, shared for
    POLL_SECONDS by every run that asks (`runs ls`, the server)."""
    with _LOCK:
        if fresh or time.monotonic() - _JOBS_AT[0] > POLL_SECONDS:
            found = {}
            for j in records(slurm("scontrol", "show", "job", "-o")):
                code, _, sig = (j.get("ExitCode") or "").partition(":")
                found[j.get("JobId", "")] = JobState(
                    state=(j.get("JobState") or "UNKNOWN").split("+")[0],
                    reason=j.get("Reason", ""),
                    exit_code=int(code) if code.isdigit() else None,
                    signal=int(sig) if sig.isdigit() else None,
                    nodes=j.get("NodeList", ""),
                    end=_epoch(j.get("EndTime", "")),
                )
            _JOBS.clear()
            _JOBS.update(found)
            _JOBS_AT[0] = time.monotonic()
        return dict(_JOBS)


def _epoch(text: str) -> float | None:
    """scontrol's times (2026-11-27T15:08:30, the cluster's local time; Unknown or None while running)."""
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def job(job_id: str, fresh: bool = False) -> JobState | None:
    """The job's state; None once Slurm has forgotten it."""
    return jobs(fresh).get(str(job_id))


def cancel(job_id: str, grace: float, leftovers: Callable[[], Any] | None = None) -> JobState | None:
    """SIGTERM to every step, the batch shell's included (the trainer stops, `ray start --block` stops the Ray daemons
    it started); after `grace` seconds `scancel` (SIGTERM, then
    SIGKILL after the cluster's KillWait). A job whose processes outlive that stays COMPLETING: after KillWait and
    KILL_MARGIN seconds `leftovers()` stops what this machine can (Ray's daemons escape a step's process group where
    Slurm tracks processes by group). Returns once the job has left its nodes (or after a minute more)."""
    found = job(job_id, fresh=True)
    if found is None or found.ended:
        return found
    with contextlib.suppress(TrainctlError):  # it may end meanwhile
        slurm("scancel", "--signal=TERM", "--full", str(job_id))
    found = _wait_ended(job_id, grace)
    if found is not None and not found.ended:
        with contextlib.suppress(TrainctlError):
            slurm("scancel", str(job_id))
        found = _wait_ended(job_id, kill_wait() + KILL_MARGIN)
    if found is not None and not found.ended and leftovers is not None:
        leftovers()
        found = _wait_ended(job_id, 60)
    return found


def kill_wait() -> float:
    """The cluster's KillWait: seconds between a job's SIGTERM and its SIGKILL (30 when it does not say)."""
    with contextlib.suppress(TrainctlError, ValueError):
        for line in slurm("scontrol", "show", "config").splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "KillWait":
                return float(value.split()[0])
    return 30.0


def _wait_ended(job_id: str, seconds: float) -> JobState | None:
    deadline = time.monotonic() + seconds
    found = job(job_id, fresh=True)
    while found is not None and not found.ended and time.monotonic() < deadline:
        time.sleep(0.5)
        found = job(job_id, fresh=True)
    return found
