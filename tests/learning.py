"""What "it learned" means in the tests (issue 29): a metric measured before and after training moved by more than
the run-to-run noise measured for it. One function, so that the test that breaks learning on purpose shows that the
very check the learning tests use can fail."""

from __future__ import annotations

from pathlib import Path
from statistics import mean

from trainctl.metrics import held_out, read_metrics, series


def moved(values: list[float], by: float, window: int = 1, lower: bool = False) -> str | None:
    """None when the mean of the last `window` values beats the mean of the first `window` by at least `by` (down,
    with `lower`); else why not, with the numbers."""
    if len(values) < 2 * window:
        return f"{len(values)} values: too few to compare the first {window} with the last {window}"
    first, last = mean(values[:window]), mean(values[-window:])
    gained = first - last if lower else last - first
    if gained >= by:
        return None
    way = "fell" if lower else "rose"
    return f"{way} by {gained:.4f} (first {window}: {first:.4f}, last {window}: {last:.4f}); wanted at least {by}"


def assert_learned(run: Path, metric: str, by: float, window: int = 1, lower: bool = False) -> None:
    """The run's metric (its training log, or its held-out record: validation and `trainctl eval`) moved."""
    source = held_out(run) if (metric.startswith(("val", "eval/"))) else read_metrics(run)
    values = [v for _, v in series(source, metric)]
    why = moved(values, by, window, lower)
    assert why is None, f"{run.name} did not learn: {metric} {why}: {values}"
