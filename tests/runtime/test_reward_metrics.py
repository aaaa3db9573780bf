"""The reward metrics hook: pinned to the verl source it wraps, installed only when trainctl asks for it."""

from __future__ import annotations

import hashlib
import inspect
import os
import subprocess
import sys
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


def _wrapped(env: dict[str, str]) -> str:
    code = (
        "import verl, verl.trainer.ppo.v1.trainer_base as tb\n"
        "print(tb.compute_data_metrics.__name__, tb.PPOTrainer._compute_metrics.__module__)"
    )
    clean = {k: v for k, v in os.environ.items() if k not in ("TRAINCTL_REWARD_KIND", "VERL_PLATFORM")}
    return subprocess.run(
        [sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True, check=True
    ).stdout.split()


def test_the_plugin_wraps_the_trainer_only_when_trainctl_asks():
    assert _wrapped({}) == ["compute_data_metrics", "verl.trainer.ppo.v1.trainer_base"]
    assert _wrapped({"TRAINCTL_REWARD_KIND": "judge"}) == [
        "compute_data_metrics_with_reward",
        "trainctl.runtime.reward_metrics",
    ]
