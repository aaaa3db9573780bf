"""The memory estimate with LoRA and QLoRA, against numbers computed by hand for Qwen2.5-7B (28 layers, hidden 3584,
28 heads with 4 KV heads of 128, MLP 18944; 7.62B parameters as its model option declares)."""

from __future__ import annotations

import pytest

from trainctl.models.info import model_info
from trainctl.models.memory import estimate, setup_from
from trainctl.plan import make_plan

P = 7_620_000_000
# one block's linear layers: q, o (3584 x 3584), k, v (3584 x 512), gate, up, down (3584 x 18944)
LINEAR = 28 * (2 * 3584 * 3584 + 2 * 3584 * 512 + 3 * 3584 * 18944)
# rank 16 on all of them: r x (in + out) each
LORA_16 = 28 * 16 * (2 * (3584 + 3584) + 2 * (3584 + 512) + 3 * (3584 + 18944))


def _parts(*args: str) -> dict[str, float]:
    plan = make_plan(["model=qwen2.5-7b", *args], native=False)
    e = estimate(model_info("qwen2.5-7b"), setup_from(plan.cfg, plan.value))
    return {p.what: p.bytes for p in e.train}


def test_the_hand_computed_counts():
    assert LINEAR == 6_525_288_448
    assert LORA_16 == 40_370_176


def test_lora_sft_on_one_gpu():
    """verl trains in fp32: the frozen base at 4 B/param, the adapters at 4 B, their gradients and Adam moments."""
    parts = _parts("algorithm=sft", "data=gsm8k", "hardware=1gpu", "lora=r16")
    assert parts["weights"] == 4 * P + 4 * LORA_16 == 30_641_480_704
    assert parts["gradients"] == 4 * LORA_16 == 161_480_704
    assert parts["optimizer"] == 8 * LORA_16 == 322_961_408
    full = _parts("algorithm=sft", "data=gsm8k", "hardware=1gpu")
    assert (full["gradients"], full["optimizer"]) == (4 * P, 8 * P)


def test_lora_grpo_has_no_reference_copy():
    """With LoRA verl's reference is the actor with its adapters off: no second model."""
    assert "reference model" not in _parts("algorithm=grpo", "data=gsm8k", "hardware=8gpu", "lora=r16")
    assert "reference model" in _parts(
        "algorithm=grpo", "data=gsm8k", "hardware=8gpu", "hardware.ref_param_offload=false"
    )


def test_lora_on_named_layers_counts_only_those():
    parts = _parts("algorithm=sft", "data=gsm8k", "hardware=1gpu", "lora=r16", "lora.target_modules=[q_proj,v_proj]")
    assert parts["gradients"] == 4 * 28 * 16 * ((3584 + 3584) + (3584 + 512)) == 4 * 5_046_272


def test_qlora_dpo_on_one_gpu():
    """4-bit NF4 blocks: 0.5 B + an fp32 scale per 64 weights = 0.5625 B/param; the rest (embeddings, output layer,
    norms) in bf16; fp32 adapters. 6,525,288,448 x 0.5625 + 1,094,711,552 x 2 + 40,370,176 x 4 = 6,021,378,560."""
    parts = _parts("algorithm=dpo", "data=hh-rlhf", "hardware=1gpu", "lora=qlora-r16")
    assert parts["weights"] == pytest.approx(6_021_378_560, abs=1)
    assert parts["weights"] == pytest.approx(LINEAR * 0.5625 + (P - LINEAR) * 2 + LORA_16 * 4, abs=1)
    assert parts["gradients"] == 4 * LORA_16 and parts["optimizer"] == 8 * LORA_16
    assert "reference model" not in parts  # the base with the adapters off
    lora = _parts("algorithm=dpo", "data=hh-rlhf", "hardware=1gpu", "lora=r16")
    assert lora["weights"] == 2 * P + 4 * LORA_16  # bf16 base on a GPU


def test_model_info_shows_the_qlora_breakdown_and_the_layers(cli):
    result = cli("model", "info", "qwen2.5-7b", "algorithm=dpo", "data=hh-rlhf", "hardware=1gpu", "lora=qlora-r16")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "linear layers   q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj (lora.target_modules)" in out
    assert "6.53B in 4-bit NF4 x 0.5625 B + 1.09B x 2 B + 40M LoRA params x 4 B (one rank)" in out
    assert "Fits: peak" in out


def test_full_dpo_of_7b_that_does_not_fit_offers_lora_and_qlora(cli):
    result = cli(
        "model", "info", "qwen2.5-7b", "algorithm=dpo", "data=hh-rlhf", "hardware=1gpu", "hardware.gpu_memory_gb=24"
    )
    out = result.stdout
    assert "Does not fit" in out
    fixes = [
        ln.split(" -> ")[0].split() for ln in out.split("Changes that make it fit:")[1].splitlines() if " -> " in ln
    ]
    assert ["lora=qlora-r16"] in fixes, fixes
    again = cli(
        "model",
        "info",
        "qwen2.5-7b",
        "algorithm=dpo",
        "data=hh-rlhf",
        "hardware=1gpu",
        "hardware.gpu_memory_gb=24",
        "lora=qlora-r16",
    )
    assert "Fits: peak" in again.stdout, again.stdout
