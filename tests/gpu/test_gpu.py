"""The GPU paths for real, on one CUDA GPU: SFT with FSDP, DPO, GRPO through main_ppo with the vLLM rollout, PPO with
a critic, checkpoint merges, and trainctl's memory estimate against the memory the run really allocated.

Skipped without CUDA (the CPU suite never runs them); `make test-gpu` on a GPU machine.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest

from tests.gpu.conftest import cuda, report
from trainctl.metrics import read_metrics, series

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda(), reason="needs a CUDA GPU: run `make test-gpu` there")]

REWARD = Path(__file__).resolve().parent.parent / "launch" / "partial_reward.py"
# one GPU, no flash-attn wheel needed: SDPA attention
GPU = ["hardware=1gpu", "hardware.attn_implementation=sdpa"]


def _mid(model: Path) -> list[str]:
    return [f"model.path={model}", "model.params=7.6e7"]


def _train(cli, *args: str):
    start = time.monotonic()
    result = cli("train", *args)
    return result, time.monotonic() - start


def _merge_and_load(cli, run: Path, out: Path):
    merged = cli("ckpt", "merge", str(run), "--out", str(out))
    assert merged.exit_code == 0, merged.output
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(out)


def test_sft_with_fsdp_on_cuda_merges_and_fits_the_estimate(cli, gpu_ready, tmp_path):
    args = ["recipe=quickstart", *GPU, *_mid(gpu_ready), "run.name=sft-gpu", "data.train_max_samples=256"]
    args += ["hardware.micro_batch_size_per_gpu=8", "hardware.fsdp_strategy=fsdp2"]
    result, seconds = _train(cli, *args)
    assert result.exit_code == 0, result.output[-4000:]
    run = tmp_path / "work" / "runs" / "sft-gpu"
    metrics = read_metrics(run)
    losses = [v for _, v in series(metrics, "train/loss")]
    assert len(losses) >= 4 and losses[-1] < losses[0], losses
    measured = max(v for _, v in series(metrics, "perf/max_memory_allocated_gb"))
    assert measured > 0  # the GPU really held the model

    from trainctl.models.info import from_folder
    from trainctl.models.memory import GiB, estimate, setup_from
    from trainctl.plan import make_plan

    plan = make_plan(args, native=False)
    est = estimate(from_folder("mid", gpu_ready), setup_from(plan.cfg, plan.value)).train_total / GiB
    report("sft", seconds=round(seconds, 1), final_loss=losses[-1], measured_gb=measured, estimate_gb=est)
    # the estimate is an upper bound (every sequence at full length): never below what the run allocated
    assert est >= measured * 0.9, (est, measured)

    model = _merge_and_load(cli, run, tmp_path / "merged-sft")
    assert sum(p.numel() for p in model.parameters()) > 5e7


def test_dpo_on_cuda(cli, gpu_ready, tmp_path):
    args = ["recipe=dpo-arith-tiny-cpu", *GPU, *_mid(gpu_ready), "run.name=dpo-gpu", "run.max_steps=8"]
    result, seconds = _train(cli, *args)
    assert result.exit_code == 0, result.output[-4000:]
    run = tmp_path / "work" / "runs" / "dpo-gpu"
    losses = [v for _, v in series(read_metrics(run), "train/loss")]
    assert losses, "DPO logged its loss"
    report("dpo", seconds=round(seconds, 1), final_loss=losses[-1])
    _merge_and_load(cli, run, tmp_path / "merged-dpo")


def _rl(model: Path, name: str, steps: int) -> list[str]:
    return [
        "recipe=grpo-arith-tiny-cpu",
        *GPU,
        *_mid(model),
        f"run.name={name}",
        f"run.max_steps={steps}",
        "reward=fn",
        f"reward.fn={REWARD}:compute_score",
        "hardware.gpu_memory_utilization=0.35",
        # no CUDA-graph capture: a 3-step test would spend most of its time compiling
        "actor_rollout_ref.rollout.enforce_eager=true",
    ]


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed (the gpu extra)")
def test_grpo_with_the_vllm_rollout(cli, gpu_ready, tmp_path):
    result, seconds = _train(cli, *_rl(gpu_ready, "grpo-gpu", 3))
    assert result.exit_code == 0, result.output[-4000:]
    run = tmp_path / "work" / "runs" / "grpo-gpu"
    backend = (run / "verl_ppo.yaml").read_text()
    assert "name: vllm" in backend
    metrics = read_metrics(run)
    assert sorted(metrics) == [1, 2, 3]
    for key in ("critic/score/mean", "actor/pg_loss", "actor/kl_loss", "perf/throughput"):
        assert all(key in metrics[s] for s in metrics), key
    throughput = [metrics[s]["perf/throughput"] for s in (2, 3)]
    report("grpo-vllm", seconds=round(seconds, 1), throughput_tokens_per_s=throughput)
    _merge_and_load(cli, run, tmp_path / "merged-grpo")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed (the gpu extra)")
def test_ppo_with_a_critic(cli, gpu_ready, tmp_path):
    args = [*_rl(gpu_ready, "ppo-gpu", 2), "algorithm=ppo"]
    result, seconds = _train(cli, *args)
    assert result.exit_code == 0, result.output[-4000:]
    metrics = read_metrics(tmp_path / "work" / "runs" / "ppo-gpu")
    assert sorted(metrics) == [1, 2]
    assert all("critic/vf_loss" in metrics[s] for s in (1, 2))
    report("ppo-critic", seconds=round(seconds, 1))


@pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is None, reason="QLoRA needs bitsandbytes (the gpu extra)")
def test_qlora_dpo_on_cuda(cli, gpu_ready, tmp_path):
    """QLoRA: the base in 4-bit NF4 on the GPU, rank-16 adapters trained; the adapter folds into the base."""
    args = ["recipe=dpo-arith-tiny-cpu", *GPU, *_mid(gpu_ready), "lora=qlora-r16", "run.name=qlora", "run.max_steps=8"]
    result, seconds = _train(cli, *args)
    assert result.exit_code == 0, result.output[-4000:]
    run = tmp_path / "work" / "runs" / "qlora"
    losses = [v for _, v in series(read_metrics(run), "train/loss")]
    assert len(losses) == 8, losses
    final = run / "checkpoints" / "checkpoint-8"
    assert (final / "adapter_config.json").is_file() and not list(final.glob("model*.safetensors"))
    listed = cli("ckpt", "ls", str(run))
    assert " 16/32 " in listed.stdout, listed.stdout
    report("qlora-dpo", seconds=round(seconds, 1), final_loss=losses[-1])
    _merge_and_load(cli, run, tmp_path / "merged-qlora")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed (the gpu extra)")
def test_grpo_with_lora_on_the_vllm_rollout(cli, gpu_ready, tmp_path):
    """verl's own LoRA path on vLLM: the base once, then the adapters as a LoRA request after every update."""
    result, seconds = _train(cli, *_rl(gpu_ready, "grpo-lora-gpu", 2), "lora=r8")
    assert result.exit_code == 0, result.output[-4000:]
    run = tmp_path / "work" / "runs" / "grpo-lora-gpu"
    metrics = read_metrics(run)
    assert sorted(metrics) == [1, 2]
    # the rollout samples from base + adapter: its probabilities agree with the actor's (bf16 vLLM: loosely)
    assert metrics[2]["training/rollout_probs_diff_mean"] < 0.05, metrics[2]
    report("grpo-lora-vllm", seconds=round(seconds, 1))
    _merge_and_load(cli, run, tmp_path / "merged-grpo-lora")
