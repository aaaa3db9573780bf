"""LoRA for real on CPU (`lora=r8`), for SFT (verl), DPO (TRL) and GRPO (verl with trainctl's hf rollout): the
adapters train and the base does not, the checkpoints are listed as LoRA, and `ckpt merge` folds them into a model
that generates."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.launch.conftest import FAST_SFT
from trainctl.metrics import read_metrics, series


def _shard(folder: Path) -> dict[str, torch.Tensor]:
    """verl's rank-0 model shard (world size 1: whole tensors) as plain tensors."""
    import torch.distributed.tensor  # the shards hold DTensors

    state = torch.load(folder / "model_world_size_1_rank_0.pt", map_location="cpu", weights_only=False)
    return {k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in state.items()}


def _base(path: Path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).state_dict()


def _check_verl_lora_shard(folder: Path, base: dict[str, torch.Tensor]) -> None:
    """The adapters moved off their initialisation (B starts at 0) and every base weight is the initial one."""
    state = _shard(folder)
    lora_b = {k: v for k, v in state.items() if "lora_B" in k}
    assert lora_b and all(v.abs().max() > 0 for v in lora_b.values()), "every adapter's B trained away from 0"
    frozen = {k: v for k, v in state.items() if "lora_" not in k}
    assert len(frozen) >= len(base) - 1  # lm_head is tied
    for name, tensor in frozen.items():
        plain = name.replace("base_model.model.", "").replace(".base_layer", "")
        assert torch.equal(tensor.float(), base[plain]), f"base weight {plain} changed"
    # verl 0.9.1's engine checkpoint writes no lora_adapter/ folder: rank and alpha go to lora_train_meta.json
    assert (folder / "lora_train_meta.json").is_file()


def _list_merge_generate(cli, run: Path, out: Path, base: dict[str, torch.Tensor]):
    """`ckpt ls` shows rank/alpha 8/16; `ckpt merge` folds the adapters; the merged model generates."""
    listed = cli("ckpt", "ls", str(run))
    assert listed.exit_code == 0, listed.output
    header, row = listed.stdout.splitlines()[:2]
    assert "lora r/alpha" in header and " 8/16 " in row, listed.stdout
    merged = cli("ckpt", "merge", str(run), "--out", str(out))
    assert merged.exit_code == 0, merged.output
    assert "LoRA changed 28 tensors" in merged.output, merged.output  # 7 linear layers x 2 blocks x (A, B)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    after = model.state_dict()
    assert set(after) == set(base) and not any("lora_" in k for k in after)
    changed = [k for k, v in after.items() if not torch.allclose(v.float(), base[k], atol=1e-6)]
    assert changed and all(k.endswith("_proj.weight") for k in changed), "only adapted layers differ after folding"
    tok = AutoTokenizer.from_pretrained(out)
    ids = tok("What is 2 + 3?", return_tensors="pt")
    assert model.generate(**ids, max_new_tokens=4, do_sample=False).shape[1] > ids["input_ids"].shape[1]
    return model


@pytest.mark.slow  # a verl SFT start of its own; LoRA's adapters, merge and generation: test_dpo_with_lora below
def test_sft_with_lora(cli, ready, tmp_path):
    result = cli("train", *FAST_SFT, "lora=r8", "run.name=sft-lora")
    assert result.exit_code == 0, result.output[-4000:]
    run = tmp_path / "work" / "runs" / "sft-lora"
    losses = [v for _, v in series(read_metrics(run), "train/loss")]
    assert len(losses) == 4 and losses[-1] < losses[0], losses
    base = _base(ready[0])
    _check_verl_lora_shard(run / "checkpoints" / "global_step_4", base)
    _list_merge_generate(cli, run, tmp_path / "merged", base)


def test_dpo_with_lora(cli, ready, tmp_path, dpo_lora_run):
    run = dpo_lora_run.path  # the session's shared run (tests/real_runs.py)
    losses = [v for _, v in series(read_metrics(run), "train/loss")]
    assert len(losses) == 16 and sum(losses[-4:]) / 4 < sum(losses[:4]) / 4 - 0.02, losses
    final = run / "checkpoints" / "checkpoint-16"
    import json

    adapter = json.loads((final / "adapter_config.json").read_text())
    assert (adapter["r"], adapter["lora_alpha"]) == (8, 16)
    # TRL saves the adapter alone: the base stays where it was, unchanged
    assert not list(final.glob("model*.safetensors"))
    base = _base(ready[0])
    _list_merge_generate(cli, run, tmp_path / "merged", base)


def _prob_change(model, base_path: Path, text: str = "What is 12 + 30? ####") -> float:
    """The largest change of a next-token probability between the base model and `model` over a text."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32)
    ids = AutoTokenizer.from_pretrained(base_path)(text, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        return float((model(ids).logits.softmax(-1) - base(ids).logits.softmax(-1)).abs().max())


@pytest.mark.slow  # the reward-model run (tests/launch/test_reward.py, slow); DPO with LoRA is in the default suite
def test_grpo_with_lora_syncs_adapters_to_the_rollout(cli, ready, tmp_path, model_run):
    # the reward-model run (tests/launch/conftest.py) is GRPO with lora=r8 and a learning rate that moves the policy
    # far in one step, so that a rollout ignoring the adapters would show
    assert model_run.result.exit_code == 0, model_run.result.output[-4000:]
    run = model_run.dir
    metrics = read_metrics(run)
    assert sorted(metrics) == [1, 2], sorted(metrics)
    for step in (1, 2):
        assert "actor/pg_loss" in metrics[step] and "actor/kl_loss" in metrics[step]
    base = _base(ready[0])
    _check_verl_lora_shard(run / "checkpoints" / "global_step_2" / "actor", base)
    model = _list_merge_generate(cli, run, tmp_path / "merged", base)
    # step 2 sampled after the step-1 update: verl compares the rollout's token probabilities with the actor's
    # (base + adapter); they agree to float precision (measured: 2e-9), while the adapters moved the policy's
    # probabilities a thousand times further from the base (measured: 2e-3; the tiny model spreads its probability)
    diff = metrics[2]["training/rollout_probs_diff_max"]
    moved = _prob_change(model, ready[0])
    assert diff < 1e-6 and moved > 1000 * diff, (diff, moved)
