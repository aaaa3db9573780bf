"""Each bad LoRA setting is one clear error before anything starts (`config validate` exits 1), with the fix."""

from __future__ import annotations

import pytest


def _validate(cli, *args: str):
    return cli("config", "validate", *args)


BAD = [
    (
        ["lora=r8", "lora.rank=0"],
        "lora.rank = 0 is out of range: it must be at least 1.",
        "Hint: lora.rank=1",
    ),
    (
        ["lora=r8", "lora.alpha=-16"],
        "lora.alpha = -16 is out of range: it must be at least 1.",
        "Hint: lora.alpha=16",
    ),
    (
        ["algorithm=dpo", "data=hh-rlhf", "lora=r8", "lora.dropout=1.5"],
        "lora.dropout = 1.5 is out of range: it must be in the range [0, 1).",
        "Hint: lora.dropout=",
    ),
    (
        ["algorithm=sft", "lora=r8", "lora.dropout=0.1"],
        "lora.dropout = 0.1 with algorithm=sft: verl 0.9.1's LoRA has no dropout",
        "Hint: lora.dropout=0",
    ),
    (
        ["algorithm=grpo", "lora=r8", "lora.target_modules=[q_proj,v_prj]"],
        "lora.target_modules names 1 layer that Qwen2ForCausalLM (model=tiny) does not have.",
        "Hint: lora.target_modules=[q_proj,v_proj]",
    ),
    (
        ["algorithm=sft", "lora=r8", "lora.target_modules=attn.*"],
        "lora.target_modules = 'attn.*' matches no layer of Qwen2ForCausalLM (model=tiny).",
        "Hint: lora.target_modules=[q_proj,k_proj], or lora.target_modules=all-linear",
    ),
    (
        ["algorithm=dpo", "data=hh-rlhf", "lora=qlora-r16"],
        "lora.quantize = 4bit (QLoRA) on hardware=cpu: bitsandbytes' 4-bit NF4 layers need a CUDA GPU.",
        "Hint: lora=r16 (LoRA without the 4-bit base) on cpu, or a GPU: hardware=1gpu",
    ),
    (
        ["algorithm=sft", "lora=qlora-r16", "hardware=1gpu"],
        "lora.quantize = 4bit (QLoRA) with algorithm=sft: verl 0.9.1 cannot train on a 4-bit base",
        "Hint: lora=r16 (LoRA on the full-precision base), or algorithm=dpo",
    ),
    (
        ["algorithm=grpo", "lora.quantize=4bit", "hardware=1gpu"],
        "lora.quantize = 4bit but LoRA is off (lora=none, lora.rank = null): a 4-bit base needs adapters to train.",
        "Hint: lora=qlora-r16, or lora.quantize=none",
    ),
    (
        ["algorithm=dpo", "data=hh-rlhf", "use_peft=true", "lora_r=8"],
        "lora_r is set by the lora group now.",
        "Hint: lora.rank=8, and drop lora_r",
    ),
    (
        ["algorithm=dpo", "data=hh-rlhf", "use_peft=true"],
        "use_peft is set by the lora group now.",
        "Hint: lora=r16, and drop use_peft",
    ),
    (
        ["algorithm=grpo", "actor_rollout_ref.model.lora_rank=32"],
        "actor_rollout_ref.model.lora_rank is set by the lora group now.",
        "Hint: lora.rank=32, and drop actor_rollout_ref.model.lora_rank",
    ),
    (
        ["algorithm=sft", "model.target_modules=[q_proj]"],
        "model.target_modules is set by the lora group now.",
        "Hint: lora.target_modules=[q_proj], and drop model.target_modules",
    ),
    (
        ["algorithm=grpo", "lora=r8", "actor_rollout_ref.rollout.layered_summon=true"],
        "actor_rollout_ref.rollout.layered_summon = true with LoRA needs the rollout to load the base model itself, "
        "but actor_rollout_ref.rollout.load_format = dummy",
        "Hint: actor_rollout_ref.rollout.load_format=safetensors, or actor_rollout_ref.rollout.layered_summon=false",
    ),
]


@pytest.mark.parametrize(("args", "message", "hint"), BAD, ids=[" ".join(a) for a, _, _ in BAD])
def test_a_bad_lora_setting_is_one_clear_error(args, message, hint, cli, tiny_model):
    result = _validate(cli, *args)
    assert result.exit_code == 1, result.output
    assert message in result.stderr, result.stderr
    assert hint in result.stderr, result.stderr


def test_qlora_without_bitsandbytes_is_refused_at_launch_and_warned_about_in_a_dry_run(
    cli, tiny_model, arith_data, no_processes, monkeypatch
):
    import trainctl.checks.lora

    monkeypatch.setattr(trainctl.checks.lora, "bitsandbytes_installed", lambda: False)
    args = ["recipe=dpo-arith-tiny-cpu", "lora=qlora-r16", "hardware=1gpu"]
    dry = cli("train", *args, "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert (
        "Warning: lora.quantize = 4bit (QLoRA) loads the base with bitsandbytes, which is not installed" in dry.stderr
    )
    launch = cli("train", *args)
    assert launch.exit_code == 1, launch.output
    assert "Error: lora.quantize = 4bit (QLoRA) loads the base with bitsandbytes, which is not installed here." in (
        launch.stderr
    )
    assert "Hint: pip install bitsandbytes" in launch.stderr


def test_a_qlora_plan_on_one_gpu_composes_and_validates(cli, tiny_model):
    """A dry run needs no GPU: TRL's own validation (DPOConfig, ModelConfig with load_in_4bit) runs here too."""
    result = cli("train", "algorithm=dpo", "data=hh-rlhf", "lora=qlora-r16", "hardware=1gpu", "--dry-run")
    assert result.exit_code == 0, result.output
    from trainctl.plan import make_plan

    plan = make_plan(["algorithm=dpo", "data=hh-rlhf", "lora=qlora-r16", "hardware=1gpu"])
    assert plan.errors == []
    assert (plan.value("use_peft"), plan.value("lora_r"), plan.value("lora_alpha")) == (True, 16, 32)
    assert plan.value("load_in_4bit") is True and plan.value("lora_target_modules") == ["all-linear"]


FAMILIES = [("sft", "arith"), ("dpo", "hh-rlhf"), ("grpo", "arith"), ("ppo", "arith")]
RANKS = ("r8", "r16", "r32")
# every shipped option for each family (the ranks differ only in rank and alpha: each family under one of them in
# `make test`, every pair with the slow tests); QLoRA for DPO on a GPU option (verl's families refuse it: BAD above)
OPTIONS = [
    pytest.param(lora, a, d, marks=() if RANKS[i % len(RANKS)] == lora else pytest.mark.slow)
    for lora in RANKS
    for i, (a, d) in enumerate(FAMILIES)
] + [("qlora-r16", "dpo", "hh-rlhf")]


def test_the_shipped_lora_options():
    from trainctl.config.search import SearchPath

    assert set(SearchPath.default().options("lora")) == {"none", "r8", "r16", "r32", "qlora-r16"}


@pytest.mark.parametrize(("lora", "algorithm", "data"), OPTIONS)
def test_every_lora_option_composes_and_validates(lora, algorithm, data, tiny_model):
    from trainctl.plan import make_plan

    hardware = "1gpu" if lora.startswith("qlora") else "cpu"
    plan = make_plan([f"algorithm={algorithm}", f"data={data}", f"lora={lora}", f"hardware={hardware}"])
    assert plan.errors == []
    rank = plan.cfg.lora.rank
    key = {"sft": "model.lora_rank", "dpo": "lora_r"}.get(algorithm, "actor_rollout_ref.model.lora_rank")
    assert plan.value(key) == rank
    if algorithm == "ppo":
        assert plan.value("critic.model.lora_rank") == 0, "the critic stays fully trained"


def test_lora_none_leaves_the_backends_defaults(tiny_model):
    from trainctl.plan import make_plan

    for algorithm, data in (("sft", "arith"), ("dpo", "hh-rlhf"), ("grpo", "arith")):
        plan = make_plan([f"algorithm={algorithm}", f"data={data}"], native=False)
        assert not any("lora" in k or k in ("use_peft", "target_modules") for k in plan.built.leaves), algorithm
