"""`trainctl ckpt best` and `ckpt prune`: choosing checkpoints by the metrics logged at their steps."""

from __future__ import annotations

import difflib
import shutil
from dataclasses import dataclass
from pathlib import Path

from trainctl.ckpt.layout import Checkpoint, CheckpointError, Listing, list_checkpoints

# metrics where lower is better; anything else (reward, accuracy, score) is maximised. lm-eval's (eval --tasks):
# word_perplexity, byte_perplexity and bits_per_byte lower, acc, exact_match, f1, ... higher
_LOWER = ("loss", "perplexity", "ppl", "kl", "error", "grad_norm", "bits_per_byte")


def default_mode(metric: str) -> str:
    return "min" if any(w in metric.lower() for w in _LOWER) else "max"


def require_metric(listing: Listing, metric: str, fix: str) -> None:
    """A metric the run never logged is an error naming the ones it did (not an empty column or ranking)."""
    from trainctl.metrics import unknown_metric

    source = listing.metrics_source
    # a trainctl run folder (runs/NAME/metrics), or the file the metrics came from
    where = str(source.parent if source and source.name == "metrics" else source or listing.root)
    error = unknown_metric(metric, listing.logged, where, fix)
    if error:
        raise CheckpointError(error.message, hint=error.hint, details=error.details)


def best(listing: Listing, metric: str, mode: str | None = None) -> tuple[Checkpoint, float, str]:
    mode = mode or default_mode(metric)
    if mode not in ("min", "max"):
        raise CheckpointError(f"--mode {mode!r} is not min or max", hint="--mode max")
    require_metric(listing, metric, f"trainctl ckpt best {listing.root} --metric {{}}")
    scored = [
        (float(c.metrics[metric]), c)
        for c in listing.checkpoints
        if not c.incomplete
        and isinstance(c.metrics.get(metric), int | float)
        and c.metrics[metric] == c.metrics[metric]  # not NaN
    ]
    if not scored:
        known = sorted({k for c in listing.checkpoints for k in c.metrics})
        close = difflib.get_close_matches(metric, known, n=1, cutoff=0.5)
        where = f" (from {listing.metrics_source})" if listing.metrics_source else ""
        raise CheckpointError(
            f"no checkpoint in {listing.root} has metric {metric!r} logged at its step{where}",
            details=[f"metrics at checkpoint steps: {', '.join(known[:12]) or 'none'}"],
            hint=f"trainctl ckpt best {listing.root} --metric {close[0] if close else (known[0] if known else 'NAME')}",
        )
    pick = min if mode == "min" else max
    value, ckpt = pick(scored, key=lambda vc: vc[0])
    return listing.chose(ckpt), value, mode


@dataclass
class PrunePlan:
    keep: list[tuple[Checkpoint, str]]  # checkpoint, why
    delete: list[Checkpoint]

    @property
    def freed(self) -> int:
        return sum(c.size for c in self.delete)


def plan_prune(target: Path, keep_last: int, keep_best: str | None = None, mode: str | None = None) -> PrunePlan:
    if keep_last < 1:
        raise CheckpointError(f"--keep-last {keep_last}: keep at least 1", hint="--keep-last 1")
    listing = list_checkpoints(target)
    if len(listing.checkpoints) == 1 and listing.checkpoints[0].path == Path(target):
        raise CheckpointError(
            f"{target} is one checkpoint, not a folder of them", hint="trainctl ckpt prune runs/<name>"
        )
    why: dict[Path, list[str]] = {}
    for c in listing.checkpoints[-keep_last:]:
        why.setdefault(c.path, []).append(f"last {keep_last}")
    for c in listing.checkpoints:
        if c.latest:
            why.setdefault(c.path, []).append("latest")
    if keep_best:
        require_metric(listing, keep_best, f"trainctl ckpt prune {target} --keep-last {keep_last} --keep-best {{}}")
        b, value, m = best(listing, keep_best, mode)
        why.setdefault(b.path, []).append(f"best {keep_best} ({m}) = {value:.4g}")
    keep = [(c, ", ".join(why[c.path])) for c in listing.checkpoints if c.path in why]
    delete = [c for c in listing.checkpoints if c.path not in why]
    return PrunePlan(keep, delete)


def apply_prune(plan: PrunePlan) -> None:
    for c in plan.delete:
        # renamed first, so an interrupted delete never leaves a half-deleted folder that looks like a checkpoint
        doomed = c.path.parent / f".{c.path.name}.deleting"
        c.path.rename(doomed)
        shutil.rmtree(doomed)
