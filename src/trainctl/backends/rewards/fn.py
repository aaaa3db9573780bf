"""reward=fn: your own scorer, a Python function verl's naive reward manager calls for every response (verl's
`reward.custom_reward_function`). The file is checked by reading it, never run (trainctl.data.rewards)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trainctl.backends.rewards.base import RewardKind
from trainctl.backends.rewards.registry import register
from trainctl.config.schema import opt


@dataclass
class FnSettings:
    fn: str | None = opt("your scorer, path/to/file.py:function (function defaults to compute_score)")


def function(spec: str) -> tuple[str, str]:
    """(absolute file, function) of `path/to/file.py:function`; the function defaults to compute_score."""
    file, _, name = spec.rpartition(":")
    return str(Path(file or spec).expanduser().resolve()), (name if file else "compute_score")


@register("fn")
class Fn(RewardKind):
    summary = "your function, called for every response"
    Settings = FnSettings
    needs = {"fn": "path/to/reward.py:compute_score"}
    scores_every_row = True
    function_key = "reward.fn"

    def verl(self, cfg, search):
        spec = self.settings(cfg.reward).fn
        if not spec:
            return {}
        path, name = function(spec)
        return {"custom_reward_function": {"path": path, "name": name}}
