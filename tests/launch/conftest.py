"""Fixtures for real runs: the model and data in place, and small settings so each run takes seconds."""

from __future__ import annotations

import pytest

# 128 rows / batch 32 = 4 steps per epoch; one micro-batch of 8 per step
FAST_SFT = ["recipe=quickstart", "data.train_max_samples=128", "hardware.micro_batch_size_per_gpu=8", "run.epochs=1"]
FAST_DPO = ["recipe=dpo-arith-tiny-cpu", "run.max_steps=16"]


@pytest.fixture
def ready(tiny_model, arith_data):
    """The tiny model and the arith data where the quickstart looks for them."""
    return tiny_model, arith_data
