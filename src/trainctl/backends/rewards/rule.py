"""reward=rule: verl's built-in scorer for each row's data_source (gsm8k, MATH, ...), chosen by verl's
default_compute_score. trainctl sets nothing: verl's naive reward manager does exactly what it does by default."""

from __future__ import annotations

from trainctl.backends.rewards.base import RewardKind
from trainctl.backends.rewards.registry import register


@register("rule")
class Rule(RewardKind):
    summary = "verl's scorer for each row's data_source (the default)"
    verl_default = True
