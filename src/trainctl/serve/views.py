"""What the API's routes and the pages answer about runs: a run's detail, lineage, config, checkpoints, a comparison,
the GPUs. Plain functions over the run store, shared by trainctl.serve.routes (JSON) and trainctl.serve.pages (HTML)."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import orjson

from trainctl.serve import jobs
from trainctl.serve.reading import json_number, key_values, last_lines, read_run_metrics
from trainctl.serve.security import Secrets
from trainctl.serve.store import RunStore


def pending_row(job: dict) -> dict:
    return {
        "uuid": job["uuid"],
        "name": job.get("name"),
        "status": "created",
        "detail": "not started",
        "pending": True,
        "algorithm": (job.get("fields") or {}).get("algorithm"),
        "family": job.get("family"),
        "description": job.get("description"),
        "created": job.get("created"),
        "steps_done": 0,
        "problems": len(job.get("problems") or []),
        "command": job.get("command"),
    }


def attempt_of(attempts: list[dict], n: int | None) -> dict | None:
    if not attempts:
        return None
    return attempts[-1] if n is None else next((a for a in attempts if a.get("n") == n), None)


def _trainctl_tree(path: Path) -> dict:
    from trainctl.serve.store import read_tree

    return read_tree(path / "trainctl.yaml")


def trainctl_value(path: Path, keys: tuple[str, ...]):
    node = _trainctl_tree(path)
    for k in keys:
        node = node.get(k) if isinstance(node, dict) else None
    return node


def detail(store: RunStore, secrets: Secrets, e) -> dict:
    """A run as its page and GET /api/jobs/{uuid} show it."""
    from trainctl.runs.progress import Progress
    from trainctl.runs.status import parse_time

    info = e.info
    m = read_run_metrics(e.path)
    last = e.info.attempts[-1] if e.info.attempts else {}
    started = parse_time(last.get("started"))
    p = Progress(info.family, total=info.steps_total, started=started.timestamp() if started else time.time())
    from trainctl.serve.events import BACKLOG_STEPS

    p.add_metrics(list(m.steps.items())[-BACKLOG_STEPS:], backlog=True)
    if last:
        lines, _ = last_lines(e.path / last.get("log", ""), 5000, 4 << 20)
        for line in lines:
            p.add_line(line, backlog=True)
    latest: dict = {}
    for data in m.steps.values():
        latest.update(data)
    per = p.seconds_per_step()
    total = info.steps_total or p.total
    tree = _trainctl_tree(e.path)
    links = {"page": f"/runs/{e.path.name}", "files": f"/files/{e.uuid}/"}
    if last.get("launcher") == "ray_job" and last.get("address") and last.get("job_id"):
        links["ray_dashboard"] = f"{str(last['address']).rstrip('/')}/#/jobs/{last['job_id']}"
    job = {}
    with contextlib.suppress(OSError, orjson.JSONDecodeError):
        job = orjson.loads((e.path / jobs.JOB_FILE).read_bytes())
    return {
        **e.row(),
        "path": str(e.path),
        "description": job.get("description"),
        "attempts": info.attempts,
        "key_metrics": key_values(info.family, latest),
        "steps_logged": len(m.steps),
        "seconds_per_step": per,
        "eta_seconds": max(0, total - p.done) * per if info.alive and per is not None and total else None,
        "alerts": [{"kind": a.kind, "message": a.message, "hint": a.hint, "step": a.step} for a in p.alerts],
        "links": links,
        "lineage": lineage(store, e, tree, job),
        "args": info.raw.get("args") or [],
    }


def _lock_lineage(path: Path) -> dict | None:
    """The lineage `model=runs/NAME` recorded in a run's lock.json (trainctl.ckpt.lineage), if it has one."""
    try:
        found = orjson.loads((path / "lock.json").read_bytes()).get("lineage")
    except (OSError, orjson.JSONDecodeError, AttributeError):
        return None
    return found if isinstance(found, dict) else None


def lineage(store: RunStore, e, tree: dict, job: dict) -> dict:
    """Where a run comes from and what came of it: the run and checkpoint its model was trained by (model=runs/NAME,
    recorded in lock.json), its attempts (resumes), the job that created it, merged checkpoints, evaluations, and
    the runs that start from it."""
    from trainctl.ckpt.lineage import Lineage

    model = tree.get("model") or {}
    model_path = str(model.get("path") or "")
    source = _lock_lineage(e.path)
    here = str(e.path.resolve())
    parent = None
    children = []
    for other in store.entries(query_jobs=False):
        if other.path == e.path:
            continue
        if source and source.get("run") == str(other.path.resolve()):
            parent = {"uuid": other.uuid, "name": other.info.name}
        theirs = _lock_lineage(other.path)
        if theirs and theirs.get("run") == here:
            children.append({"uuid": other.uuid, "name": other.info.name, "step": theirs.get("step")})
    came_from = None
    if source:
        try:
            described = Lineage(**source).describe()
        except TypeError:  # a lineage written by another version
            described = str(source.get("source"))
        came_from = {"run": parent, "step": source.get("step"), "checkpoint": source.get("checkpoint"),
                     "describe": described}  # fmt: skip
    ckpts = e.path / "checkpoints"
    merged = sorted(p.name for p in ckpts.glob("*-hf")) if ckpts.is_dir() else []
    evals = e.path / "eval" / "metrics.jsonl"
    return {
        "model": {"name": model.get("name") or e.info.model, "path": model_path, "from": came_from},
        "data": {"name": e.info.data, "train_files": (tree.get("data") or {}).get("train_files")},
        "attempts": [
            {
                "n": a.get("n"),
                "started": a.get("started"),
                "ended": a.get("ended"),
                "state": a.get("state"),
                "exit_code": a.get("exit_code"),
            }
            for a in e.info.attempts
        ],
        "created_by": job.get("started_by") or "trainctl train",
        "merged": merged,
        "evaluated": evals.is_file(),
        "children": children,
    }


def run_config(e, secrets: Secrets) -> dict:
    def text(name: str | None) -> str | None:
        if not name:
            return None
        try:
            return (e.path / name).read_text(errors="replace")
        except OSError:
            return None

    return {
        "trainctl": text("trainctl.yaml"),
        "backend": text(e.info.raw.get("config_file")),
        "backend_file": e.info.raw.get("config_file"),
        "command": text("command.sh"),
        "args": e.info.raw.get("args") or [],
    }


def checkpoints(path: Path) -> list[dict]:
    from trainctl.ckpt.layout import CheckpointError, list_checkpoints
    from trainctl.metrics import read_jsonl

    try:
        listing = list_checkpoints(path)
    except CheckpointError:
        return []
    evals = {}
    scores = path / "eval" / "metrics.jsonl"
    if scores.is_file():
        evals = read_jsonl(scores)
    out = []
    for c in listing.checkpoints:
        if c.path == path:  # not a run with checkpoints
            continue
        logged = {k: json_number(v) for k, v in c.metrics.items() if isinstance(v, int | float)}
        out.append(
            {
                "step": c.step,
                "path": str(c.path.relative_to(path)) if path in c.path.parents else str(c.path),
                "eval_results": {k: json_number(v) for k, v in evals.get(c.step, {}).items()},
                "metrics": logged,
                "layout": c.layout,
                "parts": [p.name for p in c.parts],
                "size": c.size,
                "latest": c.latest,
                "incomplete": c.incomplete,
            }
        )
    return out


def comparison(store: RunStore, keys: list[str]) -> dict:
    from trainctl.runs.compare import compare

    if len(keys) < 2:
        raise jobs.ActionError("compare needs two runs or more.", 422, hint="/api/compare?runs=UUID1,UUID2")
    entries = []
    for k in keys:
        found = store.find(k)
        if found is None:
            raise jobs.ActionError(f"no run {k}.", 404)
        entries.append(store.entry(*found, query_jobs=False))
    c = compare([e.info for e in entries])
    return {
        "runs": [
            {"uuid": e.uuid, "name": e.info.name, "algorithm": e.info.algorithm, "status": e.info.status}
            for e in entries
        ],
        "differ": {k: [json_number(v) for v in vals] for k, vals in c.differ.items()},
        "by_name": c.by_name,
        "same": c.same,
        "metrics": {k: [json_number(v) for v in vals] for k, vals in c.metrics.items()},
    }


def gpu_data(source=None) -> dict:
    from trainctl.runs.gpus import driver_missing, gpu_stats

    stats = (source or gpu_stats)()
    reason = None if stats else (driver_missing() or "NVML reports no GPU")
    return {
        "available": bool(stats),
        "reason": reason,
        "gpus": [
            {
                "index": g.index,
                "name": g.name,
                "utilization": g.utilization,
                "memory_used": g.used,
                "memory_total": g.total,
                "temperature": g.temperature,
                "power_watts": g.power,
            }
            for g in stats
        ],
    }
