"""The eval tests read the session's GRPO run (tests/real_runs.py: 2 steps, a checkpoint at each, verl validating
before training and after each step with this folder's text_reward.py, its validation samples dumped)."""

from __future__ import annotations

from pathlib import Path

REWARD = Path(__file__).with_name("text_reward.py")
REWARD_ARGS = ["reward=fn", f"reward.fn={REWARD}:compute_score"]
