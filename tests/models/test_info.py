"""`trainctl model info`: the model read from its folder (or its option), and the memory estimate with its fixes."""

from __future__ import annotations

import dataclasses
import re

import pytest

from trainctl.models.info import params_from_arch, safetensors_params


def test_a_folder_is_read_from_its_files(cli, tiny_model):
    import torch
    from transformers import AutoModelForCausalLM

    exact = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(tiny_model).parameters())
    params, dtype = safetensors_params(tiny_model)
    assert (params, dtype) == (exact, "float32")
    assert torch  # the count is the one torch sees, read from 8 bytes and a JSON header per file

    result = cli("model", "info", "tiny")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert f"parameters      {exact:,} ({exact // 1000}k; counted from the safetensors headers)" in out
    assert "Qwen2ForCausalLM" in out and "chat template   yes" in out and "dtype           float32" in out
    assert "4 layers, hidden 64, 2 heads (1 KV), MLP 128, vocab 512, tied embeddings" in out
    assert "Memory per process, training sft on hardware=cpu (1 process)" in out and "Fits:" in out


def test_an_option_not_pulled_is_read_from_its_arch(cli):
    result = cli("model", "info", "qwen2.5-7b")
    assert result.exit_code == 0, result.output
    assert "(not pulled)" in result.stdout and "7,620,000,000 (7.62B; from the model option" in result.stdout
    assert "chat template   unknown until pulled" in result.stdout


@pytest.mark.parametrize("name", ["qwen2.5-0.5b", "qwen2.5-7b", "qwen3-8b", "llama3-8b-instruct"])
def test_declared_parameter_counts_match_the_architecture(name):
    """conf/model's `params` and `arch` agree (within 2%: biases and norms differ between families)."""
    from trainctl.config.load import load

    model = load([f"model={name}"]).cfg.model
    computed = params_from_arch(dataclasses.asdict(model.arch))
    assert abs(computed - model.params) / model.params < 0.02, (computed, model.params)


def _gib(line: str) -> float:
    return float(re.search(r"([\d.]+) GiB", line)[1])


def test_full_fine_tuning_7b_on_one_gpu_does_not_fit_and_each_fix_does(cli):
    """16 bytes a parameter (fp32 weights, gradients, two Adam moments) is 113 GiB for 7.6B: not on an 80 GiB GPU.
    Every fix it offers, passed back on the command line, is re-estimated from the real config and fits."""
    words = ["algorithm=sft", "hardware=1gpu", "data=gsm8k"]
    result = cli("model", "info", "qwen2.5-7b", *words)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "Does not fit: peak" in out
    weights = next(ln for ln in out.splitlines() if ln.strip().startswith("training  weights"))
    assert _gib(weights) == pytest.approx(7.62e9 * 4 / 2**30, abs=0.1)
    fixes = out.split("Changes that make it fit:")[1].splitlines()[1:]
    fixes = [ln.split(" -> ")[0].split() for ln in fixes if " -> " in ln]
    assert ["lora=r32"] in fixes and ["hardware.optimizer_offload=true"] in fixes
    for fix in fixes:
        again = cli("model", "info", "qwen2.5-7b", *words, *fix)
        assert again.exit_code == 0, again.output
        assert "Fits: peak" in again.stdout, (fix, again.stdout)


def test_grpo_counts_the_rollout_share_and_its_weights(cli):
    result = cli("model", "info", "qwen2.5-72b", "algorithm=grpo", "hardware=8gpu", "data=gsm8k")
    out = result.stdout
    assert "vllm" in out and "gpu_memory_utilization 0.6 of the device" in out
    assert "Problem: vllm's share (gpu_memory_utilization 0.6 = 48.0 GiB) cannot hold its bf16 weights" in out
    line = next(ln for ln in out.splitlines() if "Changes that make it fit" in ln)
    fix = out.split(line)[1].splitlines()[1].split(" -> ")[0].split()
    assert "hardware.rollout_tp=4" in fix
    again = cli("model", "info", "qwen2.5-72b", "algorithm=grpo", "hardware=8gpu", "data=gsm8k", *fix)
    assert "Fits: peak" in again.stdout, again.stdout


def test_explain_prints_how(cli):
    out = cli("model", "info", "tiny", "--explain").stdout
    assert "verl trains in fp32" in out and "gpu_memory_utilization" in out


def test_unknown_model_gets_did_you_mean(cli):
    result = cli("model", "info", "qwen3-9b")
    assert result.exit_code == 1
    assert "unknown model 'qwen3-9b'" in result.stderr and "Did you mean" in result.stderr
