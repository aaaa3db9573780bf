"""The reward metrics: the figures trainctl.runtime.verl_patches adds to the training log when trainctl asks
(the hook itself, and the verl source it wraps, are tested in tests/runtime/test_verl_patches.py)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from trainctl.runtime import reward_metrics


def test_score_metrics_are_the_mean_and_spread_of_sequence_scores():
    scores = torch.zeros(4, 3)
    scores[:, -1] = torch.tensor([0.0, 1.0, 1.0, 2.0])
    out = reward_metrics.score_metrics("model", SimpleNamespace(batch={"token_level_scores": scores}))
    assert out == {
        "reward/model/mean": 1.0,
        "reward/model/std": torch.tensor([0.0, 1, 1, 2]).std(unbiased=False).item(),
    }


def test_only_the_judge_adds_figures_per_step(monkeypatch):
    """reward=model has no hub to ask: its step adds nothing (and asks no Ray actor)."""
    monkeypatch.setattr(reward_metrics, "judge_metrics", lambda step: {"reward/judge/failures": float(step)})
    assert reward_metrics.RewardMetrics("model").step_metrics(None, 3, {}) == {}
    assert reward_metrics.RewardMetrics("judge").step_metrics(None, 3, {}) == {"reward/judge/failures": 3.0}
