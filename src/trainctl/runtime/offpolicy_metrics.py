"""An off-policy run's figures in verl's training log (offpolicy=overlap|split, issue 56), beside verl's own.

verl 0.9.1 logs the staleness of a step's samples as mean, max and min (training/off_policy/trajectory_staleness*),
never its distribution, and logs how long the trainer waited for its batch as timing_s/gen, a time that in the
async modes is not decoding. trainctl.runtime.verl_patches wraps the trainer's `_compute_metrics` and asks
OffpolicyMetrics, each step, for

  offpolicy/staleness/K     share of the step's samples K policy versions behind the policy they train (K = 0, 1,
                            ... up to the cap, and beyond it if any is): verl's worst-case staleness of each sample,
                            from its oldest token (the version its generation started under)
  offpolicy/staleness_max   the largest K of the step
  offpolicy/at_cap          share of the samples at offpolicy.max_staleness (generation as far ahead as allowed)
  offpolicy/trainer_wait    share of the step the trainer spent waiting for its batch (timing_s/gen / timing_s/step)

trainctl sets TRAINCTL_OFFPOLICY (the mode and the cap, `overlap:1`; `overlap:` for no cap) for every off-policy run;
its verl plugin applies the patch then.
"""

from __future__ import annotations

from collections import Counter


def staleness_figures(tags: list[dict], global_steps: int, cap: int | None) -> dict[str, float]:
    """The staleness distribution of a step's samples (verl's batch tags: min_global_steps, the weight version a
    sample's generation started under; padding rows left out)."""
    lags = [(global_steps - 1) - int(t["min_global_steps"]) for t in tags if not t.get("is_padding", False)]
    if not lags:
        return {}
    counts = Counter(lags)
    top = max(max(counts), cap or 0)
    out = {f"offpolicy/staleness/{k}": counts.get(k, 0) / len(lags) for k in range(top + 1)}
    out["offpolicy/staleness_max"] = float(max(lags))
    if cap is not None:
        out["offpolicy/at_cap"] = sum(n for k, n in counts.items() if k >= cap) / len(lags)
    return out


class OffpolicyMetrics:
    """The off-policy set of figures trainctl.runtime.verl_patches adds to the training log."""

    ENV = "TRAINCTL_OFFPOLICY"
    WRAPS = ("PPOTrainer._compute_metrics",)
    name = "offpolicy"

    def __init__(self, value: str):
        self.mode, _, cap = value.partition(":")
        self.cap = int(cap) if cap else None

    def step_metrics(self, batch, global_steps: int, metrics: dict) -> dict[str, float]:
        out = staleness_figures(list(batch.tags), global_steps, self.cap)
        step, waited = metrics.get("timing_s/step"), metrics.get("timing_s/gen")
        if step and waited is not None:
            out["offpolicy/trainer_wait"] = float(waited) / float(step)
        return out
