"""Metrics a run logged ({"step": N, "data": {...}} per line, verl's file-logger format), and a loss curve."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from trainctl.errors import TrainctlError

# what a run's loss is called, by trainer (the last resort of run_summary when no key metric was logged)
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
            found = record(json.loads(line))
        except ValueError:
            continue  # a half-written last line of an interrupted run
        if found:
            out.setdefault(found[0], {}).update(found[1])
    return out


def record(rec) -> tuple[int, dict] | None:
    """(step, metrics) from one parsed JSONL line in any of read_jsonl's formats; None for a line without a step."""
    try:
        step = int(rec["step"])
    except (ValueError, KeyError, TypeError):
        return None
    if isinstance(rec.get("data"), dict):
        return step, rec["data"]
    values = rec["metrics"] if isinstance(rec.get("metrics"), dict) else rec
    return step, {k: v for k, v in values.items() if k not in NOT_METRICS}


def read_metrics(run_dir: Path) -> dict[int, dict]:
    """step -> metrics, merged over every attempt in order (a resumed attempt's steps win)."""
    out: dict[int, dict] = {}
    files = sorted((Path(run_dir) / "metrics").glob("attempt-*.jsonl"), key=lambda p: int(p.stem.split("-")[1] or 0))
    for f in files:
        for step, values in read_jsonl(f).items():
            out.setdefault(step, {}).update(values)
    return dict(sorted(out.items()))


def grouped_names(names: list[str]) -> list[str]:
    """Metric names, compactly: those sharing a parent as parent/{a,b,c} (a PPO run logs ~70 names)."""
    groups: dict[str, list[str]] = {}
    for name in sorted(names):
        parent, _, leaf = name.rpartition("/")
        groups.setdefault(parent, []).append(leaf)
    out = []
    for parent, leaves in groups.items():
        if not parent:
            out += leaves
        elif len(leaves) == 1:
            out.append(f"{parent}/{leaves[0]}")
        else:
            out.append(f"{parent}/{{{','.join(leaves)}}}")
    return out


def unknown_metric(metric: str, logged: list[str], where: str, fix: str) -> TrainctlError | None:
    """The error for a metric a run never logged: did-you-mean, and every name it did log. `fix` is the command to
    suggest with {} where the metric goes."""
    if metric in logged:
        return None
    import textwrap

    from trainctl.suggest import closest

    if not logged:
        return TrainctlError(
            f"{where} has no metrics logged, so none can be shown or ranked ({metric!r} asked for).",
            hint="every trainctl run records them in runs/NAME/metrics/; a run started before this version did not",
        )
    guess = closest(metric, logged, n=1, cutoff=0.5)
    details = [f"Did you mean '{guess[0]}'?"] if guess else []
    details.append(f"Metrics logged ({len(logged)}):")
    details += ["  " + line for line in textwrap.wrap(", ".join(grouped_names(logged)), 110)]
    return TrainctlError(
        f"{where} never logged the metric {metric!r}.",
        details=details,
        hint=fix.format(guess[0] if guess else logged[0]),
    )


def series(metrics: dict[int, dict], key: str) -> list[tuple[int, float]]:
    return [(s, float(m[key])) for s, m in metrics.items() if isinstance(m.get(key), int | float)]


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


class KeyMetricLike(Protocol):
    """A metric under the trainer's own names (trainctl.runs.keys.KeyMetric)."""

    def pick(self, present: set[str]) -> str | None: ...


def run_summary(run_dir: Path, key_metrics: Sequence[KeyMetricLike]) -> list[str]:
    """The end-of-run lines: the first two key metrics of the run's family (trainctl.runs.keys.key_metrics: the
    loss, and for RL the reward) from first to last step, with a sparkline."""
    metrics = read_metrics(run_dir)
    present = {k for m in metrics.values() for k in m}
    keys = [k for km in key_metrics[:2] if (k := km.pick(present))]
    if not keys:
        keys = [k for k in LOSS_KEYS if k in present][:1]
    lines = []
    for key in keys:
        points = series(metrics, key)
        values = [v for _, v in points]
        if len(values) == 1:
            lines.append(f"{key} at step {points[0][0]}: {values[0]:.4g}")
            continue
        if not values:
            continue
        lines += [
            f"{key} over {len(values)} steps: {values[0]:.4g} -> {values[-1]:.4g} "
            f"(min {min(values):.4g}, max {max(values):.4g})",
            "  " + sparkline(values),
        ]
    return lines


# what a run scored on held-out data, by trainer: verl's validation (PPO family: val-core/<source>/acc/mean@1 and the
# reward, val-aux/<source>/reward/mean@1; SFT: val/loss), TRL's evaluation (eval/loss, eval/rewards/accuracies and
# margins; a reward model's eval/accuracy and eval/margin), and `trainctl eval`'s (eval/<data>/acc and format, a
# reward model's eval/<data>/pair_accuracy; with --tasks, lm-eval's eval/<task>/acc, acc_norm, exact_match, /<filter>
# after a filter's name; written to <run>/eval/metrics.jsonl)
HELD_OUT = re.compile(
    r"^(val-core/.+/acc/mean@\d+|val-aux/.+/reward/mean@\d+|val/loss|eval/loss|eval/rewards/(accuracies|margins)"
    r"|eval/(accuracy|margin)|eval/[^/]+/(acc|format|pair_accuracy)|eval/[^/]+/(acc|acc_norm|exact_match)(/[^/]+)?)$"
)


def held_out(run_dir: Path) -> dict[int, dict]:
    """step -> the held-out metrics of a run: its own validation's, and `trainctl eval`'s of its checkpoints."""
    metrics = read_metrics(run_dir)
    evaluated = Path(run_dir) / "eval" / "metrics.jsonl"
    if evaluated.is_file():
        for step, values in read_jsonl(evaluated).items():
            metrics.setdefault(step, {}).update(values)
    out: dict[int, dict] = {}
    for step, values in metrics.items():
        kept = {k: v for k, v in values.items() if HELD_OUT.match(k) and isinstance(v, int | float)}
        if kept:
            out[step] = kept
    return dict(sorted(out.items()))


def before_after(run_dir: Path) -> list[str]:
    """One line per held-out metric measured at two steps or more: its first and last value, e.g.
    `val-core/openai/gsm8k/acc/mean@1 0.05 -> 0.41 (step 0 -> 20)`."""
    metrics = held_out(run_dir)
    lines = []
    for name in sorted({k for values in metrics.values() for k in values}):
        points = series(metrics, name)
        if len(points) >= 2:
            (s0, v0), (s1, v1) = points[0], points[-1]
            lines.append(f"{name} {v0:.4g} -> {v1:.4g} (step {s0} -> {s1})")
    return lines
