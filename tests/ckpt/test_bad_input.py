"""Every bad checkpoint gets one clear error naming the file, and no output folder is left behind."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.ckpt.conftest import make_adapter


@pytest.fixture
def step2(sft_runs, tmp_path):
    """A copy of a world-size-2 step folder, to damage."""
    step = tmp_path / "global_step_4"
    shutil.copytree(sft_runs[2] / "checkpoints" / "global_step_4", step)
    return step


def _merge_fails(cli, tmp_path, *args):
    out = tmp_path / "out"
    result = cli("ckpt", "merge", *args, "--out", str(out))
    assert result.exit_code == 1, result.output
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]
    assert "Traceback" not in result.output
    return result.stderr


def test_a_missing_shard(cli, step2, tmp_path):
    (step2 / "model_world_size_2_rank_1.pt").unlink()
    err = _merge_fails(cli, tmp_path, str(step2))
    assert f"missing shard {step2 / 'model_world_size_2_rank_1.pt'} (1 of 2 ranks present)" in err


def test_a_truncated_shard(cli, step2, tmp_path):
    shard = step2 / "model_world_size_2_rank_1.pt"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    err = _merge_fails(cli, tmp_path, str(step2))
    assert f"cannot read {shard} ({len(data) // 2:,} bytes)" in err and "truncated" in err


def test_a_world_size_that_does_not_match_the_files(cli, step2, tmp_path):
    cfg = json.loads((step2 / "fsdp_config.json").read_text())
    cfg["world_size"] = 4
    (step2 / "fsdp_config.json").write_text(json.dumps(cfg))
    err = _merge_fails(cli, tmp_path, str(step2))
    assert "fsdp_config.json says world size 4" in err and "model_world_size_2_rank_0.pt" in err


def test_shards_from_different_runs(cli, step2, sft_runs, tmp_path):
    other = sft_runs[2] / "checkpoints" / "global_step_2" / "model_world_size_2_rank_1.pt"
    import torch

    sd = torch.load(other, weights_only=True)
    sd.pop(next(iter(sd)))
    torch.save(sd, step2 / "model_world_size_2_rank_1.pt")
    err = _merge_fails(cli, tmp_path, str(step2))
    assert "model_world_size_2_rank_1.pt holds different tensors from rank 0" in err


def test_an_adapter_whose_base_cannot_be_found(cli, tiny_model_dir, tmp_path):
    adapter = make_adapter(tiny_model_dir, tmp_path / "adapter", seed=1)
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = "someone/missing-model"
    (adapter / "adapter_config.json").write_text(json.dumps(cfg))
    err = _merge_fails(cli, tmp_path, str(adapter))
    assert "cannot find the base model" in err and "'someone/missing-model'" in err
    assert "trainctl model pull someone/missing-model" in err and "--base DIR" in err


def test_an_adapter_for_another_base(cli, tiny_model_dir, tmp_path):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(tiny_model_dir)
    config.hidden_size, config.intermediate_size = 32, 64
    other = tmp_path / "other-base"
    AutoModelForCausalLM.from_config(config).save_pretrained(other)
    adapter = make_adapter(tiny_model_dir, tmp_path / "adapter", seed=1)
    err = _merge_fails(cli, tmp_path, str(adapter), "--base", str(other))
    assert "adapter's model.layers.0.mlp.down_proj.weight is 64x128 but the base's is 32x64" in err
    assert "--base" in err


def test_not_a_checkpoint(cli, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = cli("ckpt", "ls", str(empty))
    assert result.exit_code == 1 and f"{empty} is not a checkpoint trainctl knows" in result.stderr
    missing = cli("ckpt", "show", str(tmp_path / "nope"))
    assert missing.exit_code == 1 and "does not exist" in missing.stderr


def test_a_run_without_checkpoints_yet(cli, tmp_path):
    run = tmp_path / "runs" / "fresh"
    (run / "checkpoints").mkdir(parents=True)
    (run / "run.json").write_text("{}")
    result = cli("ckpt", "ls", str(run))
    assert result.exit_code == 1 and f"{run} has no checkpoints yet" in result.stderr
    assert "run.save_every=N" in result.stderr
