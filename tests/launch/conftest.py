"""Fixtures for real runs: the model and data in place, and small settings so each run takes seconds."""

from __future__ import annotations

import pytest

from tests.real_runs import FAST_DPO, FAST_SFT

__all__ = ["FAST_DPO", "FAST_SFT"]


@pytest.fixture
def ready(tiny_model, arith_data):
    """The tiny model and the arith data where the quickstart looks for them."""
    return tiny_model, arith_data
