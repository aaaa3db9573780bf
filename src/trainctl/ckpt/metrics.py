"""The metrics logged beside checkpoints, per step: trainctl's run metrics (verl's file-logger JSONL),
a Hugging Face Trainer's `trainer_state.json`, or ART's `history.jsonl`."""

from __future__ import annotations

import json
from pathlib import Path

_NOT_METRICS = {"step", "recorded_at", "timestamp", "epoch_time", "_timestamp"}


def _merge(out: dict[int, dict], step, values: dict) -> None:
    try:
        s = int(step)
    except (TypeError, ValueError):
        return
    out.setdefault(s, {}).update({k: v for k, v in values.items() if k not in _NOT_METRICS})


def read_jsonl(path: Path) -> dict[int, dict]:
    """{"step": N, "data": {...}} (verl's file logger) or flat {"step": N, "metric": v, ...} (ART) per line."""
    out: dict[int, dict] = {}
    for line in path.read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a half-written last line
        if not isinstance(rec, dict) or "step" not in rec:
            continue
        data = rec.get("data") if isinstance(rec.get("data"), dict) else rec.get("metrics")
        _merge(out, rec["step"], data if isinstance(data, dict) else rec)
    return out


def read_trainer_state(path: Path) -> dict[int, dict]:
    out: dict[int, dict] = {}
    try:
        history = json.loads(path.read_text()).get("log_history", [])
    except (ValueError, OSError):
        return out
    for rec in history:
        if isinstance(rec, dict) and "step" in rec:
            _merge(out, rec["step"], rec)
    return out


def metrics_near(target: Path, root: Path, checkpoints: list) -> tuple[dict[int, dict], Path | None]:
    """step -> metrics from whatever the run left beside its checkpoints, and the file they came from."""
    from trainctl.metrics import read_metrics

    if list((target / "metrics").glob("attempt-*.jsonl")):
        return read_metrics(target), target / "metrics"
    for d in dict.fromkeys((target, root.parent)):
        history = d / "history.jsonl"
        if history.is_file():
            return read_jsonl(history), history
    states = [c.path / "trainer_state.json" for c in checkpoints if (c.path / "trainer_state.json").is_file()]
    if states:  # the newest state holds the whole history
        return read_trainer_state(states[-1]), states[-1]
    for d in dict.fromkeys((target, root.parent)):
        for f in sorted(d.glob("*.jsonl")):
            found = read_jsonl(f)
            if found:
                return found, f
    return {}, None
