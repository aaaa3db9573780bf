"""The cheap part of `trainctl data check`, run on every plan whose data files exist: schema, reward coverage,
empty ground truths (from the parquet footer and two columns), and the custom reward function's signature."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from trainctl.errors import Problem

if TYPE_CHECKING:
    from trainctl.checks.base import Subject


def reward_fn(s: Subject) -> tuple[str | None, str | None, str]:
    """The custom reward function a plan uses: (path, name, the key that set it)."""
    from trainctl.backends.rewards import kind_of

    if s.backend != "verl-ppo":
        return None, None, ""
    path, name = s.value("reward.custom_reward_function.path"), s.value("reward.custom_reward_function.name")
    kind = kind_of(s.cfg)
    by_kind = kind.function_key and s.built.origins.get("reward.custom_reward_function.path") == kind.origin
    return path, name, kind.function_key if by_kind else "reward.custom_reward_function.path"


def checks(s: Subject) -> list[Problem]:
    from trainctl.backends.rewards import kind_of
    from trainctl.data.check import quick_check
    from trainctl.data.rewards import check_reward_fn

    fmt = s.cfg.algorithm.data_format
    path, name, key = reward_fn(s)
    problems = check_reward_fn(path, name, key) if path else []
    # a kind that scores any row (a reward model, a judge) needs no rule scorer, and maybe no ground truth
    kind = kind_of(s.cfg)
    scored = bool(path) or kind.scores_every_row
    for split_key in ("train_files", "val_files"):
        f = getattr(s.cfg.data, split_key)
        if f and Path(f).expanduser().is_file() and Path(f).suffix == ".parquet":
            problems += quick_check(Path(f), fmt, custom_reward=scored, ground_truth=kind.needs_ground_truth)
    return problems
