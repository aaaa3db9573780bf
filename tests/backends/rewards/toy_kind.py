"""A reward kind from outside trainctl, written as a user's package writes one: one module, registered with
@register and found through the entry point group trainctl.reward_kinds (tests/backends/rewards/test_toy_kind.py
installs it the way pip does).

reward=length scores a response by how close its length is to reward.target_chars, through verl's naive reward
manager and a custom reward function (this file's `length_score`), whose keyword arguments verl passes from
custom_reward_function.reward_kwargs.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainctl.backends.rewards import RewardKind, register
from trainctl.config.schema import opt
from trainctl.errors import Problem

# a token is rarely longer than this many characters
CHARS_PER_TOKEN = 8


@dataclass
class LengthSettings:
    target_chars: int = opt("the response length, in characters, that scores 1", 16, ge=1)


def length_score(data_source, solution_str, ground_truth, extra_info=None, target_chars: int = 16) -> float:
    """1 at exactly target_chars characters, falling linearly to 0 at twice (or none) as many."""
    return max(0.0, 1.0 - abs(len(solution_str) - target_chars) / target_chars)


@register("length")
class Length(RewardKind):
    summary = "responses closer to reward.target_chars characters score higher"
    Settings = LengthSettings
    scores_every_row = True
    needs_ground_truth = False

    def verl(self, cfg, search):
        s = self.settings(cfg.reward)
        function = {"path": __file__, "name": "length_score", "reward_kwargs": {"target_chars": s.target_chars}}
        return {"custom_reward_function": function}

    def checks(self, s):
        target = self.settings(s.cfg.reward).target_chars
        longest = s.cfg.data.max_response_length * CHARS_PER_TOKEN
        if target <= longest:
            return []
        return [
            Problem(
                f"reward.target_chars = {target}: a response is at most data.max_response_length = "
                f"{s.cfg.data.max_response_length} tokens, about {longest} characters.",
                key="reward.target_chars",
                hint=f"reward.target_chars={longest // 2}",
            )
        ]
