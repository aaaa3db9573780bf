"""The few metrics that matter for each algorithm family, under the trainer's own names (TRL's as its JSONL callback
writes them: train/..., eval/...)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KeyMetric:
    label: str
    names: tuple[str, ...]  # the trainer's names, first present wins
    lower_is_better: bool | None = None  # None: neither (entropy, response length)

    def pick(self, present: set[str] | dict) -> str | None:
        return next((n for n in self.names if n in present), None)


LOSS = KeyMetric("loss", ("train/loss",), True)
KEY_METRICS: dict[str, tuple[KeyMetric, ...]] = {
    "sft": (
        LOSS,
        KeyMetric("val loss", ("val/loss",), True),
        KeyMetric("grad norm", ("train/grad_norm",)),
    ),
    "dpo": (
        LOSS,
        KeyMetric("accuracy", ("train/rewards/accuracies",), False),
        KeyMetric("margin", ("train/rewards/margins",), False),
        KeyMetric("eval loss", ("eval/loss",), True),
        KeyMetric("grad norm", ("train/grad_norm",)),
    ),
    # a reward model: how often the chosen answer scores higher, and by how much
    "rm": (
        LOSS,
        KeyMetric("accuracy", ("train/accuracy",), False),
        KeyMetric("margin", ("train/margin",), False),
        KeyMetric("eval accuracy", ("eval/accuracy",), False),
        KeyMetric("grad norm", ("train/grad_norm",)),
    ),
    # unpaired: no accuracy; the margin is the mean desirable reward minus the mean undesirable one, and the KL
    # estimate against the reference
    "kto": (
        LOSS,
        KeyMetric("margin", ("train/rewards/margins",), False),
        KeyMetric("KL", ("train/kl",)),
        KeyMetric("eval loss", ("eval/loss",), True),
        KeyMetric("grad norm", ("train/grad_norm",)),
    ),
    # the SFT term on the chosen answer and the odds-ratio term
    "orpo": (
        LOSS,
        KeyMetric("accuracy", ("train/rewards/accuracies",), False),
        KeyMetric("NLL", ("train/nll_loss",), True),
        KeyMetric("log odds ratio", ("train/log_odds_ratio",), False),
        KeyMetric("eval loss", ("eval/loss",), True),
    ),
    # CPO and SimPO (the reward: beta x the mean log-likelihood)
    "cpo": (
        LOSS,
        KeyMetric("accuracy", ("train/rewards/accuracies",), False),
        KeyMetric("margin", ("train/rewards/margins",), False),
        KeyMetric("eval loss", ("eval/loss",), True),
        KeyMetric("grad norm", ("train/grad_norm",)),
    ),
    "ppo": (
        KeyMetric("reward", ("critic/score/mean",), False),
        # the KL the algorithm controls: to the teacher (algorithm=distill: verl's per-token estimate), to the
        # reference (a loss term or a reward penalty), else to the old policy
        KeyMetric(
            "KL", ("actor/distillation/abs_loss", "actor/kl_loss", "actor/reward_kl_penalty", "actor/ppo_kl"), True
        ),
        KeyMetric("entropy", ("actor/entropy",)),
        KeyMetric("response len", ("response_length/mean",)),
        KeyMetric("policy loss", ("actor/pg_loss",)),
        KeyMetric("value loss", ("critic/vf_loss",), True),
        # how far the rollout's token probabilities are from the trainer's (runs.alerts.ROLLOUT_GAP)
        KeyMetric("rollout gap", ("training/rollout_probs_diff_mean",), True),
    ),
}

# the one number `runs ls` shows per run
HEADLINE = {"ppo": KEY_METRICS["ppo"][0]}  # else the loss


# an environment's (env=NAME: trainctl.runtime.env_metrics): each task's train reward and, with a curriculum, level
ENV_METRICS = (("reward", False), ("level", False))


def env_metrics(present: set[str] | dict) -> tuple[KeyMetric, ...]:
    """The per-task metrics of a run with an environment, for the tasks it logged (none without one)."""
    tasks = sorted({n.split("/")[1] for n in present if n.startswith("env/") and n.count("/") == 2})
    return tuple(
        KeyMetric(f"{task} {what}", (f"env/{task}/{what}",), better)
        for task in tasks
        for what, better in ENV_METRICS
        if f"env/{task}/{what}" in present
    )


def env_patterns() -> list[dict[str, str]]:
    """env_metrics as patterns (serve's run page charts a run's tasks as their metrics arrive): a label with {task},
    and the regular expression of the names it labels (the task its group)."""
    return [{"label": f"{{task}} {what}", "pattern": f"^env/([^/]+)/{what}$"} for what, _ in ENV_METRICS]


def key_metrics(family: str | None, present: set[str] | dict | None = None) -> tuple[KeyMetric, ...]:
    """The family's key metrics; with the names a run logged (`present`), its environment's per-task ones too."""
    return KEY_METRICS.get(family or "", (LOSS,)) + (env_metrics(present) if present else ())


def headline(family: str | None) -> KeyMetric:
    return HEADLINE.get(family or "", LOSS)
