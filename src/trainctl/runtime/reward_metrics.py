"""Reward metrics in verl's training log, per reward kind: `reward/<kind>/mean` and `/std` of the sequence scores of
every step, and for reward=judge the judge's calls and failures (`reward/judge/failures`, `/failure_rate`,
`/unparsed`, `/timeouts`, `/errors`, `/partial_groups`, `/seconds`).

verl 0.9.1 logs the scores' mean, max and min (critic/score/*) but no spread, and logs what reward managers return
beside the score only for validation. trainctl.runtime.verl_patches wraps two functions of the trainer's module
(pinned there with the other patches) and asks RewardMetrics for the figures:
  - trainer_base.compute_data_metrics: the mean and std of the same scores verl's critic/score/* read;
  - trainer_base.PPOTrainer._compute_metrics: the judge hub's figures for the step being logged.
trainctl sets TRAINCTL_REWARD_KIND for every PPO-family run; trainctl's verl plugin applies the patch when it is set.
"""

from __future__ import annotations


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


class RewardMetrics:
    """The reward set of figures trainctl.runtime.verl_patches adds to the training log."""

    ENV = "TRAINCTL_REWARD_KIND"
    # the verl functions whose output it adds to (trainctl.runtime.verl_patches.METRIC_PATCHES)
    WRAPS = ("compute_data_metrics", "PPOTrainer._compute_metrics")

    def __init__(self, kind: str):
        self.kind = self.name = kind

    def data_metrics(self, batch) -> dict[str, float]:
        return score_metrics(self.kind, batch)

    def step_metrics(self, batch, global_steps: int, metrics: dict) -> dict[str, float]:
        return judge_metrics(global_steps) if self.kind == "judge" else {}
