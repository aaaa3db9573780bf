"""The reward metrics hook: pinned to the verl source it wraps, installed only when trainctl asks for it."""

from __future__ import annotations

import hashlib
import inspect
from types import SimpleNamespace

import torch

from trainctl.runtime import reward_metrics

# sha256 of the source of what the hook wraps, in verl 0.9.1
PINNED = {
    "compute_data_metrics": "081d0a19a8270ad74c58d81830eba1d52ddd490b1b0f5eb7571ef322e3fb5fd9",
    "PPOTrainer._compute_metrics": "9c5c555787889555c5bd77e59f57b87d03a08e0449903a63e26186d6f511fcec",
}


def _source(name: str) -> str:
    import importlib

    owner = importlib.import_module(reward_metrics.MODULE)
    *path, attr = name.split(".")
    for p in path:
        owner = getattr(owner, p)
    fn = reward_metrics.original(name) or getattr(owner, attr)
    return hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()


def test_what_the_hook_wraps_is_what_it_was_written_for():
    assert set(PINNED) == set(reward_metrics.WRAPPED)
    for name, digest in PINNED.items():
        assert _source(name) == digest, f"verl changed {reward_metrics.MODULE}.{name}: review the reward metrics"


def test_score_metrics_are_the_mean_and_spread_of_sequence_scores():
    scores = torch.zeros(4, 3)
    scores[:, -1] = torch.tensor([0.0, 1.0, 1.0, 2.0])
    out = reward_metrics.score_metrics("model", SimpleNamespace(batch={"token_level_scores": scores}))
    assert out == {
        "reward/model/mean": 1.0,
        "reward/model/std": torch.tensor([0.0, 1, 1, 2]).std(unbiased=False).item(),
    }


def test_the_plugin_wraps_the_trainer_only_when_trainctl_asks(plugin_probe):
    plain, asked = plugin_probe(), plugin_probe(TRAINCTL_REWARD_KIND="judge")
    assert [plain["compute_data_metrics"], plain["compute_metrics"]] == [
        "compute_data_metrics",
        "verl.trainer.ppo.v1.trainer_base",
    ]
    assert [asked["compute_data_metrics"], asked["compute_metrics"]] == [
        "compute_data_metrics_with_reward",
        "trainctl.runtime.reward_metrics",
    ]
