"""The metrics logged beside checkpoints, per step: trainctl's run metrics (verl's file-logger JSONL),
a Hugging Face Trainer's `trainer_state.json`, or ART's `history.jsonl`."""

from __future__ import annotations

import json
from pathlib import Path

from trainctl.metrics import NOT_METRICS, read_jsonl, read_metrics


def read_trainer_state(path: Path) -> dict[int, dict]:
    out: dict[int, dict] = {}
    try:
        history = json.loads(path.read_text()).get("log_history", [])
    except (ValueError, OSError):
        return out
    for rec in history:
        if isinstance(rec, dict) and isinstance(rec.get("step"), int):
            out.setdefault(rec["step"], {}).update({k: v for k, v in rec.items() if k not in NOT_METRICS})
    return out


def metrics_near(target: Path, root: Path, checkpoints: list) -> tuple[dict[int, dict], Path | None]:
    """step -> metrics from whatever the run left beside its checkpoints, and the file they came from; with the
    scores `trainctl eval` wrote into the run folder (eval/metrics.jsonl) added at their steps."""
    metrics, source = _logged_metrics(target, root, checkpoints)
    for d in dict.fromkeys((target, root.parent)):
        scores = d / "eval" / "metrics.jsonl"
        if scores.is_file():
            for step, values in read_jsonl(scores).items():
                metrics.setdefault(step, {}).update(values)
            source = source or scores
            break
    return metrics, source


def _logged_metrics(target: Path, root: Path, checkpoints: list) -> tuple[dict[int, dict], Path | None]:
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
