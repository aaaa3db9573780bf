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
  offpolicy/rollout_idle    share of the time since the last step's figures that trainctl's `hf` rollout sampled
                            nothing (its busiest server's; from step 2 on; none with vLLM, whose servers do not say)

trainctl sets TRAINCTL_OFFPOLICY (the mode and the cap, `overlap:1`; `overlap:` for no cap) for every off-policy run;
its verl plugin applies the patch then.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable


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

    def __init__(self, value: str, busy: Callable[[], float | None] | None = None, clock=time.monotonic):
        self.mode, _, cap = value.partition(":")
        self.cap = int(cap) if cap else None
        self._busy = busy or _rollout_busy
        self._clock = clock
        self._last: tuple[float, float] | None = None  # (clock, rollout busy seconds) at the last step's figures

    def step_metrics(self, batch, global_steps: int, metrics: dict) -> dict[str, float]:
        out = staleness_figures(list(batch.tags), global_steps, self.cap)
        step, waited = metrics.get("timing_s/step"), metrics.get("timing_s/gen")
        if step and waited is not None:
            out["offpolicy/trainer_wait"] = float(waited) / float(step)
        busy, now = self._busy(), self._clock()
        if busy is not None:
            if self._last is not None and now > self._last[0]:
                sampled = (busy - self._last[1]) / (now - self._last[0])
                out["offpolicy/rollout_idle"] = min(1.0, max(0.0, 1.0 - sampled))
            self._last = (now, busy)
        return out


_servers: list | None = None  # the servers' handles, once looked up


def _rollout_busy() -> float | None:
    """Seconds the busiest of the run's `hf` rollout servers has spent sampling so far (their `stats`), or None
    when it has none (a vLLM rollout). Called in verl's trainer process, where Ray is up; the servers are named Ray
    actors (trainctl.runtime.hf_rollout.server_name), found once."""
    global _servers
    import ray

    from trainctl.runtime.hf_rollout import server_name

    if not ray.is_initialized():  # not in a run's trainer (a test of the figures): never start a Ray of its own
        return None
    if _servers is None:
        _servers = []
        for rank in range(16):  # a run's replicas: the hybrid one and, with split, the rollout's own
            try:
                _servers.append(ray.get_actor(server_name(rank)))
            except ValueError:
                continue
    if not _servers:
        return None
    return max(s["seconds"] for s in ray.get([a.stats.remote() for a in _servers]))
