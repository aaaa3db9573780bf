"""Metrics a run logged ({"step": N, "data": {...}} per line, verl's file-logger format), and a loss curve."""

from __future__ import annotations

import json
from pathlib import Path

LOSS_KEYS = ("train/loss", "actor/pg_loss", "critic/vf_loss", "train/rewards/accuracies")
_BARS = "▁▂▃▄▅▆▇█"


# bookkeeping fields of flat records (ART's history.jsonl), not metrics
NOT_METRICS = {"step", "recorded_at", "timestamp", "epoch_time", "_timestamp"}


def read_jsonl(path: Path) -> dict[int, dict]:
    """step -> metrics from one JSONL file: {"step": N, "data": {...}} per line (verl's file logger, trainctl's
    runs), or flat {"step": N, "metric": v, ...} / {"step": N, "metrics": {...}} (ART's history.jsonl)."""
    out: dict[int, dict] = {}
    for line in Path(path).read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
            step = int(rec["step"])
        except (ValueError, KeyError, TypeError):
            continue  # a half-written last line of an interrupted run, or a line without a step
        if isinstance(rec.get("data"), dict):
            out.setdefault(step, {}).update(rec["data"])
            continue
        values = rec["metrics"] if isinstance(rec.get("metrics"), dict) else rec
        out.setdefault(step, {}).update({k: v for k, v in values.items() if k not in NOT_METRICS})
    return out


def read_metrics(run_dir: Path) -> dict[int, dict]:
    """step -> metrics, merged over every attempt in order (a resumed attempt's steps win)."""
    out: dict[int, dict] = {}
    files = sorted((Path(run_dir) / "metrics").glob("attempt-*.jsonl"), key=lambda p: int(p.stem.split("-")[1] or 0))
    for f in files:
        for step, values in read_jsonl(f).items():
            out.setdefault(step, {}).update(values)
    return dict(sorted(out.items()))


def series(metrics: dict[int, dict], key: str) -> list[tuple[int, float]]:
    return [(s, float(m[key])) for s, m in metrics.items() if isinstance(m.get(key), int | float)]


def loss_key(metrics: dict[int, dict]) -> str | None:
    keys = {k for m in metrics.values() for k in m}
    return next((k for k in LOSS_KEYS if k in keys), None)


def sparkline(values: list[float], width: int = 60) -> str:
    if not values:
        return ""
    if len(values) > width:  # average into `width` buckets
        step = len(values) / width
        values = [
            sum(values[int(i * step) : max(int((i + 1) * step), int(i * step) + 1)])
            / len(values[int(i * step) : max(int((i + 1) * step), int(i * step) + 1)])
            for i in range(width)
        ]
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    return "".join(_BARS[min(len(_BARS) - 1, int((v - lo) / span * (len(_BARS) - 1)))] for v in values)


def loss_summary(run_dir: Path) -> list[str]:
    metrics = read_metrics(run_dir)
    key = loss_key(metrics)
    if not key:
        return []
    points = series(metrics, key)
    values = [v for _, v in points]
    return [
        f"{key} over {len(points)} steps: {values[0]:.4g} -> {values[-1]:.4g} (min {min(values):.4g})",
        "  " + sparkline(values),
    ]
