"""verl's vLLM rollout on vLLM's CPU build (hardware=cpu hardware.rollout_engine=vllm): the GRPO recipe learns as
with trainctl's CPU rollout, and the rollout samples from the policy the trainer holds after every weight sync."""

from __future__ import annotations

import pytest
import yaml

from tests.launch.test_learning import GRPO_REWARD_GAIN
from tests.learning import assert_learned
from tests.real_runs import AGENT_VLLM_STEPS
from trainctl.metrics import read_metrics, series
from trainctl.runs.alerts import ROLLOUT_GAP

# verl's rollout-vs-trainer gap (the mean absolute difference of each sampled token's probability under the rollout and
# under the trainer): issue 43's bound, met at every step (measured here: 3e-4 a step on the tiny model)
GAP_BOUND = 0.01


def test_grpo_on_vllm_learns_as_on_the_cpu_rollout(grpo_vllm_run):
    rollout = yaml.safe_load((grpo_vllm_run.path / "verl_ppo.yaml").read_text())["actor_rollout_ref"]["rollout"]
    assert (rollout["name"], rollout["dtype"], rollout["enforce_eager"], rollout["enable_sleep_mode"]) == (
        "vllm", "float32", True, False,
    )  # fmt: skip
    assert_learned(grpo_vllm_run.path, "critic/score/mean", GRPO_REWARD_GAIN, window=3)


def test_the_rollout_samples_from_the_policy_the_trainer_holds_at_every_step(grpo_vllm_run):
    gaps = series(read_metrics(grpo_vllm_run.path), ROLLOUT_GAP)
    assert len(gaps) == len(series(read_metrics(grpo_vllm_run.path), "critic/score/mean")) > 1
    assert all(gap < GAP_BOUND for _, gap in gaps), gaps
    # the live view shows it beside the run's key metrics
    assert "rollout gap" in grpo_vllm_run.output


# slow: a second vLLM training run costs the default suite ~3 minutes on 2 cores, most of it verl's and vLLM's start;
# the default suite drives verl's tool loop on vLLM through agent eval (tests/eval/test_agent_eval.py)
@pytest.mark.slow
def test_the_agent_recipe_calls_its_tools_through_vllms_turns(agent_vllm_run):
    metrics = read_metrics(agent_vllm_run.path)
    assert sorted(metrics) == list(range(1, AGENT_VLLM_STEPS + 1))
    calls = [m["tool/calls"] for m in metrics.values()]
    assert sum(calls) > 0, calls  # tiny-tools calls the calculator in about 2 of 3 samples
    assert all(m["tool/calculator/calls"] == m["tool/calls"] for m in metrics.values())
    assert all(m[ROLLOUT_GAP] < GAP_BOUND for m in metrics.values()), [m[ROLLOUT_GAP] for m in metrics.values()]
    # the trajectories' turns (calls and the calculator's answers) as verl's loop kept them
    assert any((agent_vllm_run.path / "rollouts").rglob("*.jsonl"))
