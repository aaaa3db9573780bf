"""verl's vLLM rollout on vLLM's CPU build (hardware=cpu hardware.rollout_engine=vllm): the agent recipe calls its
tools through vLLM's turns and learns as with trainctl's CPU rollout (tests/launch/test_learning.py), the GRPO recipe
too (slow), LoRA through merged-weight sync (issue 60; slow), and the rollout samples from the policy the trainer
holds after every weight sync."""

from __future__ import annotations

import pytest
import yaml

from tests.launch.test_learning import GRPO_REWARD_GAIN
from tests.learning import assert_learned
from tests.real_runs import AGENT_STEPS, LORA_VLLM_STEPS
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
    # its Ray workers are forks of a server that imported verl's vLLM server and the MCP SDK once
    # (trainctl.runtime.forkserver)
    log = (agent_run.path / "logs" / "attempt-1.log").read_text()
    assert "the workers' modules preloaded in" in log and "(vLLM's and the MCP SDK's among them)" in log
    assert "not preloaded" not in log
    # and the rollout server's engine process is a fork of the server (trainctl.runtime.vllm_cpu)
    assert log.count("trainctl: vLLM's engine process forked from its server, not spawned") == 1


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


def test_lora_on_vllms_cpu_build_folds_the_adapters_into_each_sync(cli):
    """Issue 60: lora=r8 with verl's vLLM rollout on the CPU is planned with verl's merged-weight sync (vLLM's CPU
    build lacks WeightsMapper.get_unstacked_mapper, which separate adapters need); on GPUs vLLM takes adapters."""
    cpu = cli("config", "show", "algorithm=grpo", "lora=r8", "hardware.rollout_engine=vllm", "--backend")
    assert cpu.exit_code == 0, cpu.output
    model = yaml.safe_load(cpu.stdout)["actor_rollout_ref"]["model"]
    assert (model["lora_rank"], model["lora"]["merge"]) == (8, True)
    for words in (["hardware=8gpu"], ["hardware.rollout_engine=hf"], ["lora=none"]):
        other = cli("config", "show", "algorithm=grpo", "lora=r8", "hardware.rollout_engine=vllm", *words, "--backend")
        assert yaml.safe_load(other.stdout)["actor_rollout_ref"]["model"]["lora"]["merge"] is False, words


def _stale_gap(run, step: int, scratch) -> float:
    """What the rollout gap of `step` would have been had the rollout kept the base model: the mean absolute
    difference, over the step's sampled tokens (from the rollout dump, tokenized again), between the base model's
    probability and the policy's after step - 1 (its checkpoint, merged)."""
    import json

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tests.conftest import invoke

    merged = scratch / f"step{step - 1}-hf"
    done = invoke("ckpt", "merge", str(run.path / "checkpoints" / f"global_step_{step - 1}"), "--out", str(merged))
    assert done.exit_code == 0, done.output
    base_path = yaml.safe_load((run.path / "verl_ppo.yaml").read_text())["actor_rollout_ref"]["model"]["path"]
    tokenizer = AutoTokenizer.from_pretrained(merged)
    base, policy = (AutoModelForCausalLM.from_pretrained(p, dtype=torch.float32) for p in (base_path, merged))
    gaps = []
    dump = run.work.parent / "grpo-lora-vllm-rollouts" / f"{step}.jsonl"
    for row in map(json.loads, dump.read_text().splitlines()):
        question = row["input"].split("user\n", 1)[1].rsplit("\nassistant\n", 1)[0]  # decoded without the tokens
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False
        )
        prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
        response = tokenizer(row["output"], add_special_tokens=False)["input_ids"]
        ids = torch.tensor([prompt + response])
        with torch.no_grad():
            p_base, p_policy = (m(ids).logits[0, len(prompt) - 1 : -1].softmax(-1) for m in (base, policy))
        at = torch.tensor(response).unsqueeze(-1)
        gaps += (p_base.gather(-1, at) - p_policy.gather(-1, at)).abs().squeeze(-1).tolist()
    return sum(gaps) / len(gaps)


@pytest.mark.slow  # a third vLLM training run: ~70 s of the 2 cores, most of it verl's and vLLM's start
def test_grpo_with_lora_on_vllms_cpu_build_samples_from_the_adapted_policy(grpo_lora_vllm_run, tmp_path):
    """Issue 60: GRPO with lora=r8 on vLLM's CPU build runs (it was refused: verl's adapter loading needs
    WeightsMapper.get_unstacked_mapper, which the build lacks); at every step the rollout's token probabilities are
    within 0.01 of the trainer's, while a rollout that kept the base model would be off by several times more (the
    adapters moved the policy: measured 0.011 against 0.001 at step 3)."""
    run = grpo_lora_vllm_run
    model = yaml.safe_load((run.path / "verl_ppo.yaml").read_text())["actor_rollout_ref"]["model"]
    assert (model["lora_rank"], model["lora"]["merge"]) == (8, True)
    metrics = read_metrics(run.path)
    gaps = series(metrics, ROLLOUT_GAP)
    assert len(gaps) == LORA_VLLM_STEPS and all(gap < GAP_BOUND for _, gap in gaps), gaps
    assert metrics[LORA_VLLM_STEPS]["actor/kl_loss"] > 0  # the adapters moved the policy off the base
    stale = _stale_gap(run, LORA_VLLM_STEPS, tmp_path)
    assert stale > 5 * gaps[-1][1], (stale, gaps)
