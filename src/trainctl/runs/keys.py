"""The few metrics that matter for each algorithm family, under the trainer's own names (TRL's as its JSONL callback
writes them: train/..., eval/...)."""

from __future__ import annotations

import re
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
        # verl logs actor/entropy from its old-log-prob pass; a run in bypass mode (no such pass: the tiny GRPO recipe)
        # logs the same policy's from the update, with calculate_entropy
        KeyMetric("entropy", ("actor/entropy", "actor/entropy_loss")),
        KeyMetric("response len", ("response_length/mean",)),
        KeyMetric("policy loss", ("actor/pg_loss",)),
        KeyMetric("value loss", ("critic/vf_loss",), True),
        # how far the rollout's token probabilities are from the trainer's (runs.alerts.ROLLOUT_GAP)
        KeyMetric("rollout gap", ("training/rollout_probs_diff_mean",), True),
        # offpolicy=...: the most policy versions a sample lagged, the share of the step the trainer waited for its
        # batch and the share the rollout sampled nothing (trainctl.runtime.offpolicy_metrics)
        KeyMetric("staleness", ("offpolicy/staleness_max",), True),
        KeyMetric("trainer wait", ("offpolicy/trainer_wait",), True),
        KeyMetric("rollout idle", ("offpolicy/rollout_idle",), True),
    ),
}

# the one number `runs ls` shows per run
HEADLINE = {"ppo": KEY_METRICS["ppo"][0]}  # else the loss


@dataclass(frozen=True)
class KeyPattern:
    """Key metrics whose names carry a part of the run's own (a task, a staleness): one per name a run logs."""

    kind: str
    label: str  # {} is the part the pattern captures
    pattern: str  # the names', the part its group
    lower_is_better: bool | None = None


KEY_PATTERNS = (
    # an environment's (env=NAME: trainctl.runtime.env_metrics): each task's train reward and, with a curriculum, level
    KeyPattern("env", "{} reward", r"^env/([^/]+)/reward$", False),
    KeyPattern("env", "{} level", r"^env/([^/]+)/level$", False),
    # an off-policy run's (offpolicy=...: trainctl.runtime.offpolicy_metrics): the share of samples K versions behind
    KeyPattern("staleness", "staleness {}", r"^offpolicy/staleness/(\d+)$"),
)


def matched_metrics(present: set[str] | dict) -> tuple[KeyMetric, ...]:
    """The key metrics of KEY_PATTERNS a run logged: each kind's together, by their part (a number as a number),
    in the patterns' order."""
    kinds = list(dict.fromkeys(p.kind for p in KEY_PATTERNS))
    found = []
    for i, p in enumerate(KEY_PATTERNS):
        for name in present:
            m = re.match(p.pattern, name)
            if m:
                part = m.group(1)
                order = (kinds.index(p.kind), (0, int(part), "") if part.isdigit() else (1, 0, part), i)
                found.append((order, KeyMetric(p.label.format(part), (name,), p.lower_is_better)))
    return tuple(km for _, km in sorted(found, key=lambda f: f[0]))


def key_patterns() -> list[dict[str, str]]:
    """KEY_PATTERNS for serve's run page, which charts them as a run logs them: the label ({} the name's part) and
    the regular expression of the names."""
    return [{"label": p.label, "pattern": p.pattern} for p in KEY_PATTERNS]


def key_metrics(family: str | None, present: set[str] | dict | None = None) -> tuple[KeyMetric, ...]:
    """The family's key metrics; with the names a run logged (`present`), those of KEY_PATTERNS it logged too."""
    return KEY_METRICS.get(family or "", (LOSS,)) + (matched_metrics(present) if present else ())


def headline(family: str | None) -> KeyMetric:
    return HEADLINE.get(family or "", LOSS)
