"""The memory estimate in every GPU plan: a warning (with the cheapest fix) when a run may not fit."""

from __future__ import annotations

import pytest

from trainctl.config.search import SearchPath


def test_a_run_that_may_not_fit_is_warned_about_before_launch(cli):
    result = cli("config", "validate", "algorithm=grpo", "model=qwen2.5-72b", "data=gsm8k", "hardware=8gpu")
    assert result.exit_code == 0, result.output
    assert "Warning: this run may not fit in GPU memory: about" in result.stderr
    assert "with hardware.optimizer_offload=true hardware.param_offload=true hardware.rollout_tp=4:" in result.stderr
    assert "Hint: trainctl model info qwen2.5-72b" in result.stderr


@pytest.mark.parametrize("recipe", sorted(SearchPath.default().options("recipe")))
def test_shipped_recipes_fit(recipe, cli):
    result = cli("config", "validate", f"recipe={recipe}")
    assert "may not fit in GPU memory" not in result.stderr


def test_cpu_runs_are_not_estimated(cli):
    assert "GPU memory" not in cli("config", "validate", "recipe=quickstart").stderr
