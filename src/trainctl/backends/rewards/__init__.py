"""Reward kinds: the ways RL responses are scored, one module each, found by name (`reward.kind`).

A kind (trainctl.backends.rewards.base.RewardKind) holds everything that is its own: the settings it reads beside
`reward.kind` (a dataclass: their types, ranges and meaning), its translation into verl's `reward` node (reward
manager, custom_reward_function, reward_model, reward_kwargs), its checks and probes before anything starts, and
what `trainctl eval` needs to know to score with it. The rest of trainctl asks the kind (`kind.scores_every_row`,
`kind.manager(cfg)`) and never compares kind names.

    rule   verl's scorer for each row's data_source (nothing set: what verl does by default)     rule.py
    fn     your function, through verl's custom_reward_function                                   fn.py
    model  a reward model: verl's reward-model servers on vllm/sglang, trainctl's manager on hf  model.py
    judge  an LLM judge over an OpenAI-compatible endpoint, through trainctl's manager            judge.py

A kind registers itself with `@register("name")` (trainctl.backends.rewards.registry) when its module is imported:
trainctl's own are listed in registry.BUILTIN; an installed package adds its own through the entry point group
`trainctl.reward_kinds` (`length = my_rewards.length`), imported the first time a config names the kind.
"""

from __future__ import annotations

from trainctl.backends.rewards.base import RewardKind
from trainctl.backends.rewards.registry import ENTRY_POINT_GROUP, find, kind_of, kinds, lookup, register, setting_keys

__all__ = ["ENTRY_POINT_GROUP", "RewardKind", "find", "kind_of", "kinds", "lookup", "register", "setting_keys"]
