"""Reward metrics in verl's training log, per reward kind: `reward/<kind>/mean` and `/std` of the sequence scores of
every step, and for reward=judge the judge's calls and failures (`reward/judge/failures`, `/failure_rate`,
`/unparsed`, `/timeouts`, `/errors`, `/partial_groups`, `/seconds`).

verl 0.9.1 logs the scores' mean, max and min (critic/score/*) but no spread, and logs what reward managers return
beside the score only for validation. So trainctl wraps two names in the trainer's module, once it is imported
(a post-import hook: the other processes of a run never import it, and never pay for it):
  - trainer_base.compute_data_metrics: adds the mean and std of the same scores verl's critic/score/* read;
  - trainer_base.PPOTrainer._compute_metrics: adds the judge hub's figures for the step being logged.
trainctl sets TRAINCTL_REWARD_KIND for every PPO-family run; trainctl's verl plugin installs this when it is set.
tests/runtime/test_reward_metrics.py pins the source of both, as the CPU patches are pinned.
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)

ENV = "TRAINCTL_REWARD_KIND"
MODULE = "verl.trainer.ppo.v1.trainer_base"
WRAPPED = ("compute_data_metrics", "PPOTrainer._compute_metrics")

_INSTALLED: dict[str, object] = {}


def score_metrics(kind: str, batch) -> dict[str, float]:
    """Mean and standard deviation (population) of the batch's sequence scores."""
    scores = batch.batch["token_level_scores"].sum(-1).float()
    return {
        f"reward/{kind}/mean": float(scores.mean()),
        f"reward/{kind}/std": float(scores.std(unbiased=False)) if scores.numel() else 0.0,
    }


def judge_metrics(step: int) -> dict[str, float]:
    """The judge hub's figures for this step (nothing if no response has been judged yet)."""
    import ray

    from trainctl.runtime.judge import HUB

    try:
        hub = ray.get_actor(HUB)
    except ValueError:
        return {}
    return ray.get(hub.metrics.remote(step))


def _patch(module) -> None:
    if "compute_data_metrics" in _INSTALLED:
        return
    kind = os.environ.get(ENV, "")
    compute_data_metrics = module.compute_data_metrics
    compute_metrics = module.PPOTrainer._compute_metrics

    def compute_data_metrics_with_reward(batch, use_critic=True):
        out = compute_data_metrics(batch=batch, use_critic=use_critic)
        out.update(score_metrics(kind, batch))
        return out

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        result = compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch)
        if kind == "judge":
            try:
                metrics.update(judge_metrics(global_steps))
            except Exception as e:  # the figures are a report: their absence must not stop training
                logger.warning("trainctl: no judge metrics for step %s: %s", global_steps, e)
        return result

    module.compute_data_metrics = compute_data_metrics_with_reward
    module.PPOTrainer._compute_metrics = _compute_metrics
    _INSTALLED["compute_data_metrics"] = compute_data_metrics
    _INSTALLED["PPOTrainer._compute_metrics"] = compute_metrics


def install() -> None:
    """Wrap the trainer's metrics once its module is imported (at once if it already is)."""
    import wrapt

    wrapt.register_post_import_hook(_patch, MODULE)


def original(name: str):
    """The unwrapped function (for tests)."""
    return _INSTALLED.get(name)
