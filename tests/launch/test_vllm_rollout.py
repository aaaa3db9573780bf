"""verl's vLLM rollout on vLLM's CPU build (hardware=cpu hardware.rollout_engine=vllm): the agent recipe calls its
tools through vLLM's turns and learns as with trainctl's CPU rollout (tests/launch/test_learning.py), the GRPO recipe
too (slow), and the rollout samples from the policy the trainer holds after every weight sync."""

from __future__ import annotations

import pytest
import yaml

from tests.launch.test_learning import GRPO_REWARD_GAIN
from tests.learning import assert_learned
from tests.real_runs import AGENT_STEPS
from trainctl.metrics import read_metrics, series
from trainctl.runs.alerts import ROLLOUT_GAP

# verl's rollout-vs-trainer gap (the mean absolute difference of each sampled token's probability under the rollout and
# under the trainer): issue 43's bound, met at every step (measured here: 3e-4 a step on the tiny model)
GAP_BOUND = 0.01


def _rollout(run) -> dict:
    return yaml.safe_load((run.path / "verl_ppo.yaml").read_text())["actor_rollout_ref"]["rollout"]


def test_the_agent_recipe_calls_its_tools_through_vllms_turns(agent_run):
    """The default suite's training on vLLM: the session's agent run (the agent recipe, AGENT_STEPS GRPO steps; its
    learning is checked as on trainctl's sampler by tests/launch/test_learning.py) samples its turns with verl's vLLM
    rollout, calls the calculator through them, and samples from the policy the trainer holds at every step."""
    rollout = _rollout(agent_run)
    assert (rollout["name"], rollout["dtype"], rollout["enforce_eager"], rollout["enable_sleep_mode"]) == (
        "vllm", "float32", True, False,
    )  # fmt: skip
    assert rollout["multi_turn"]["enable"] and rollout["multi_turn"]["format"] == "hermes"
    metrics = read_metrics(agent_run.path)
    assert sorted(metrics) == list(range(1, AGENT_STEPS + 1))
    calls = [m["tool/calls"] for m in metrics.values()]
    assert all(c > 0 for c in calls), calls  # tiny-tools calls the calculator in about 2 of 3 samples
    assert all(m["tool/calculator/calls"] == m["tool/calls"] for m in metrics.values())
    gaps = series(metrics, ROLLOUT_GAP)
    assert len(gaps) == AGENT_STEPS and all(gap < GAP_BOUND for _, gap in gaps), gaps


# slow: a second vLLM training run costs the default suite ~3 minutes on 2 cores, most of it verl's and vLLM's start;
# the default suite's vLLM training is the agent run's (above)
@pytest.mark.slow
def test_grpo_on_vllm_learns_as_on_the_cpu_rollout(grpo_vllm_run):
    rollout = _rollout(grpo_vllm_run)
    assert (rollout["name"], rollout["dtype"], rollout["enforce_eager"], rollout["enable_sleep_mode"]) == (
        "vllm", "float32", True, False,
    )  # fmt: skip
    assert_learned(grpo_vllm_run.path, "critic/score/mean", GRPO_REWARD_GAIN, window=3)
    gaps = series(read_metrics(grpo_vllm_run.path), ROLLOUT_GAP)
    assert len(gaps) == len(series(read_metrics(grpo_vllm_run.path), "critic/score/mean")) > 1
    assert all(gap < GAP_BOUND for _, gap in gaps), gaps
    # the live view shows it beside the run's key metrics
    assert "rollout gap" in grpo_vllm_run.output
