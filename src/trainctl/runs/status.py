"""A run folder's status, read from its status file (run.json, written by trainctl.launch.rundir.RunDir): whether
it is running, done, failed with its exit code, interrupted, or killed, with its steps, latest key metric and
timings. Where a run stands is the launcher's answer (trainctl.launchers): a local run's supervisor PID, a Ray job's
state in its cluster's Jobs API."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from trainctl.errors import TrainctlError
from trainctl.launch.rundir import RUN_FILE
from trainctl.runs.keys import headline


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
    ended: float | None = None  # when the last attempt ended, as its launcher says (a job nobody followed)

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


def read_run(path: Path, query_jobs: bool = True, metrics: bool = True) -> RunInfo:
    """A run's status; metrics=False leaves steps_done and the headline for the caller (the server reads the
    metrics' last lines instead of whole files)."""
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
    if metrics:
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


def _liveness(info: RunInfo, state: str, last: dict, query_jobs: bool) -> None:
    """Ask the launcher that started the last attempt (runs from before launchers were recorded: local)."""
    from trainctl import launchers

    name = last.get("launcher") or "local"
    try:
        launcher = launchers.get(name)
    except TrainctlError as e:  # a plugin's launcher that is not installed here
        info.status, info.detail = "unknown", e.message
        return
    found = launcher.status(state, last, info.live, query=query_jobs)
    info.status, info.detail, info.exit_code = found.status, found.detail, found.exit_code
    info.ended = found.ended


def _seconds(info: RunInfo, last: dict) -> float | None:
    total = sum(float(a.get("seconds") or 0) for a in info.attempts if a is not last or a.get("ended"))
    if last and not last.get("ended"):
        start = parse_time(last.get("started"))
        if start:
            end = time.time() if info.alive else info.ended or float(info.live.get("heartbeat") or time.time())
            total += max(0.0, end - start.timestamp())
    return total if info.attempts else None
