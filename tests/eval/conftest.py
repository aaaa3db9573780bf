"""The eval tests read the session's GRPO run (tests/real_runs.py: the GRPO recipe, 12 steps, checkpoints at 6 and
12, verl validating before training and at each checkpoint, its validation samples dumped); evals of the tiny model
score with this folder's text_reward.py, a reward that moves with any change of a response's text."""

from __future__ import annotations

from pathlib import Path

REWARD = Path(__file__).with_name("text_reward.py")
REWARD_ARGS = ["reward=fn", f"reward.fn={REWARD}:compute_score"]
