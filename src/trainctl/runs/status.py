"""A run folder's status, read from its status file (run.json, written by trainctl.launch.rundir.RunDir): whether
it is running (its supervisor's PID alive and the same process), done, failed with its exit code, interrupted, or
killed (it says running but its supervisor is gone), with its steps, latest key metric and timings. Ray-job runs
ask the cluster's Jobs API."""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from trainctl.errors import TrainctlError
from trainctl.launch.rundir import HEARTBEAT_SECONDS, RUN_FILE
from trainctl.runs.keys import headline

# a heartbeat older than this (from another machine, where the PID cannot be checked) means the run is lost
STALE_SECONDS = 6 * HEARTBEAT_SECONDS
# Ray job states -> run statuses
_JOB_STATUS = {"PENDING": "queued", "RUNNING": "running", "SUCCEEDED": "done", "FAILED": "failed", "STOPPED": "stopped"}
# run.json states -> run statuses
_STATE = {"finished": "done", "failed": "failed", "interrupted": "interrupted", "created": "created"}


@dataclass
class RunInfo:
    path: Path
    name: str
    algorithm: str = "?"
    family: str | None = None
    backend: str = "?"
    model: str = "?"
    data: str = "?"
    status: str = "?"  # running | done | failed | interrupted | killed | created | queued | stopped | lost | unknown
    detail: str = ""  # exit code, PID, what is still running
    exit_code: int | None = None
    attempts: list[dict] = field(default_factory=list)
    steps_done: int = 0
    steps_total: int | None = None
    headline: tuple[str, float | None] | None = None  # (metric name, latest value)
    started: datetime | None = None
    seconds: float | None = None
    live: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict)  # run.json as read

    @property
    def alive(self) -> bool:
        return self.status in ("running", "queued")


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S%z")
    except ValueError:
        return None


def find_run(target: Path) -> Path:
    """A run folder from what a user typed: a path, or a name under ./runs."""
    for candidate in (Path(target), Path("runs") / Path(target)):
        if (candidate / RUN_FILE).is_file():
            return candidate
    raise TrainctlError(
        f"{target}: no run there (no {RUN_FILE}).",
        hint="list the runs: trainctl runs ls" + (f" --dir {Path(target).parent}" if Path(target).parent.name else ""),
    )


def list_runs(root: Path, query_jobs: bool = True) -> list[RunInfo]:
    """Every run folder directly under `root`, newest first."""
    if not Path(root).is_dir():
        raise TrainctlError(f"{root}: no such folder.", hint="runs are written to ./runs; or pass --dir FOLDER")
    infos = [read_run(d, query_jobs) for d in sorted(Path(root).iterdir()) if (d / RUN_FILE).is_file()]
    return sorted(infos, key=lambda i: i.started.timestamp() if i.started else 0, reverse=True)


def read_run(path: Path, query_jobs: bool = True) -> RunInfo:
    path = Path(path)
    try:
        raw = json.loads((path / RUN_FILE).read_text())
    except (OSError, ValueError) as e:
        return RunInfo(path, path.name, status="unreadable", detail=str(e).splitlines()[0])
    attempts = list(raw.get("attempts") or [])
    info = RunInfo(
        path=path,
        name=raw.get("name") or path.name,
        algorithm=raw.get("algorithm", "?"),
        family=raw.get("family"),
        backend=raw.get("backend", "?"),
        attempts=attempts,
        live=dict(raw.get("live") or {}),
        raw=raw,
    )
    info.model, info.data = _model_and_data(path, raw)
    info.started = parse_time((attempts[0] if attempts else raw).get("started") or raw.get("created"))
    last = attempts[-1] if attempts else {}
    info.steps_total = last.get("steps_total")
    _metrics(info)
    _liveness(info, raw.get("state", "created"), last, query_jobs)
    info.seconds = _seconds(info, last)
    return info


def _model_and_data(path: Path, raw: dict) -> tuple[str, str]:
    if raw.get("model") and raw.get("data"):
        return raw["model"], raw["data"]
    try:  # runs written before run.json named them
        import yaml

        tree = yaml.safe_load((path / "trainctl.yaml").read_text()) or {}
        return tree.get("model", {}).get("name", "?"), tree.get("data", {}).get("name", "?")
    except (OSError, ValueError, AttributeError):
        return "?", "?"


def _metrics(info: RunInfo) -> None:
    from trainctl.metrics import read_metrics

    metrics = read_metrics(info.path)
    info.steps_done = max(metrics) if metrics else 0
    key = headline(info.family)
    name = key.pick({k for m in metrics.values() for k in m})
    if name:
        values = [m[name] for m in metrics.values() if name in m]
        info.headline = (name, values[-1] if isinstance(values[-1], int | float) else None)


def pid_alive(pid: int | None, started: float | None = None) -> bool:
    """The process is alive and, when its start time is known, the same one (PIDs are reused)."""
    if not pid:
        return False
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return started is None or abs(proc.create_time() - started) < 1.0
    except psutil.Error:
        return False


def _liveness(info: RunInfo, state: str, last: dict, query_jobs: bool) -> None:
    if last.get("job_id") and state in ("running", "submitted"):
        _job_liveness(info, last, query_jobs)
        return
    if state != "running":
        info.status = _STATE.get(state, state)
        info.exit_code = last.get("exit_code")
        if info.status == "failed":
            info.detail = f"exit {info.exit_code}"
        return
    live = info.live
    if not live:
        info.status, info.detail = "killed", "its supervisor never reported (trainctl was stopped at the start)"
        return
    if live.get("host") and live["host"] != socket.gethostname():
        age = time.time() - float(live.get("heartbeat") or 0)
        if age <= STALE_SECONDS:
            info.status, info.detail = "running", f"on {live['host']}"
        else:
            info.status, info.detail = "lost", f"on {live['host']}; no heartbeat for {age:.0f} s"
        return
    if pid_alive(live.get("pid"), live.get("pid_started")):
        info.status, info.detail = "running", f"PID {live['pid']}"
        age = time.time() - float(live.get("heartbeat") or 0)
        if age > STALE_SECONDS:
            info.detail += f"; no heartbeat for {age:.0f} s: stopped (Ctrl-Z) or hung?"
        return
    info.status = "killed"
    trainer = live.get("trainer_pid")
    if trainer and pid_alive(trainer):
        info.detail = f"trainctl (PID {live.get('pid')}) is gone; its trainer (PID {trainer}) still runs"
    else:
        info.detail = f"trainctl (PID {live.get('pid')}) is gone"


def _job_liveness(info: RunInfo, last: dict, query_jobs: bool) -> None:
    job_id, address = last["job_id"], last.get("address", "")
    if not query_jobs:
        info.status, info.detail = "unknown", f"Ray job {job_id}"
        return
    from trainctl.launch import ray_jobs

    try:
        job = ray_jobs.job_status(address, job_id)
    except TrainctlError as e:
        info.status, info.detail = "unknown", f"Ray job {job_id}: {e.message}"
        return
    info.status = _JOB_STATUS.get(job.status, job.status.lower())
    info.detail = f"Ray job {job_id}" + (f": {job.message}" if job.status == "FAILED" and job.message else "")


def _seconds(info: RunInfo, last: dict) -> float | None:
    total = sum(float(a.get("seconds") or 0) for a in info.attempts if a is not last or a.get("ended"))
    if last and not last.get("ended"):
        start = parse_time(last.get("started"))
        if start:
            end = time.time() if info.alive else float(info.live.get("heartbeat") or time.time())
            total += max(0.0, end - start.timestamp())
    return total if info.attempts else None
