"""`ckpt ls` and `ckpt show` on real checkpoints of each layout; `best` and `prune` on a real run."""

from __future__ import annotations

import shutil

from tests.real_runs import SFT_EVERY, SFT_STEPS
from trainctl.ckpt.layout import list_checkpoints


def test_ls_a_verl_sft_run(cli, sft_runs):
    result = cli("ckpt", "ls", str(sft_runs[2]))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    row2 = next(line for line in lines if "global_step_2" in line)
    row4 = next(line for line in lines if "global_step_4" in line)
    assert "verl-fsdp" in row4 and "2 (FSDP2)" in row4 and "model+optimizer+extra" in row4
    assert "4 *" in row4 and " * " not in row2.split("verl-fsdp")[0], "only the latest is starred"
    assert "val/loss=" in row2 and "train/loss=" in row4
    listing = list_checkpoints(sft_runs[1])
    assert [c.step for c in listing.checkpoints] == list(range(SFT_EVERY, SFT_STEPS + 1, SFT_EVERY))
    assert listing.checkpoints[0].part().world_size == 1
    assert listing.checkpoints[1].metrics["val/loss"] < listing.checkpoints[0].metrics["train/loss"] + 10


def test_ls_trl_checkpoints_with_trainer_state_metrics(cli, dpo_runs):
    result = cli("ckpt", "ls", str(dpo_runs["lora"]), "-m", "train/loss")  # the run folder: trainctl's metrics
    assert result.exit_code == 0, result.output
    assert "hf-trainer" in result.stdout and "checkpoint-16" in result.stdout
    row = next(line for line in result.stdout.splitlines() if "checkpoint-16" in line)
    assert "adapter" in row and "8/16" in row and "train/loss=" in row
    # TRL's own output folder, without trainctl's run files: metrics come from trainer_state.json
    full = list_checkpoints(dpo_runs["full"] / "checkpoints")
    assert full.checkpoints[-1].part().holds[0] == "hf-weights"
    assert full.metrics_source.name == "trainer_state.json"
    assert isinstance(full.checkpoints[-1].metrics.get("loss"), float)


def test_ls_art_layout_with_history(cli, art_model):
    result = cli("ckpt", "ls", str(art_model), "-m", "train/reward")
    assert result.exit_code == 0, result.output
    assert "art" in result.stdout and "train/reward=0.5" in result.stdout and "4/8" in result.stdout


def test_show_reads_config_tokenizer_and_tensors(cli, sft_runs):
    result = cli("ckpt", "show", str(sft_runs[2]))
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "world size  2, FSDP2" in out and "Qwen2ForCausalLM" in out
    assert "tokenizer   yes; chat template yes" in out
    assert "float32 x51" in out and "parameters" in out


def test_show_an_adapter(cli, art_model):
    result = cli("ckpt", "show", str(art_model / "checkpoints" / "0002"))
    assert result.exit_code == 0, result.output
    assert "lora        r=4, alpha=8, 24 tensors" in result.stdout


class _Boom:
    def __reduce__(self):
        import os

        return (os.system, ("touch PWNED",))


def test_show_never_unpickles_code(cli, sft_runs, tmp_path):
    step = tmp_path / f"global_step_{SFT_STEPS}"
    shutil.copytree(sft_runs[1] / "checkpoints" / f"global_step_{SFT_STEPS}", step)
    shard = step / "model_world_size_1_rank_0.pt"
    import torch

    torch.save({"model.embed_tokens.weight": torch.zeros(2), "x": _Boom()}, shard)
    result = cli("ckpt", "show", str(step))
    assert result.exit_code == 1
    assert f"cannot read {shard}" in result.stderr
    assert not (tmp_path / "work" / "PWNED").exists() and not list(tmp_path.rglob("PWNED"))


def test_best_and_prune(cli, sft_runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(sft_runs[2], run)  # checkpoints and validation at 2 and 4
    result = cli("ckpt", "best", str(run), "--metric", "val/loss")
    assert result.exit_code == 0, result.output
    metrics = {c.step: c.metrics["val/loss"] for c in list_checkpoints(run).checkpoints}
    best_step = min(metrics, key=metrics.get)
    assert result.stdout.strip().endswith(f"global_step_{best_step}")
    assert "(min)" in result.stderr

    typo = cli("ckpt", "best", str(run), "--metric", "val/los")
    assert typo.exit_code == 1 and "never logged the metric 'val/los'" in typo.stderr
    assert "Did you mean 'val/loss'?" in typo.stderr and "--metric val/loss" in typo.stderr

    shown = cli("ckpt", "prune", str(run), "--keep-last", "1")
    assert shown.exit_code == 0 and "would delete" in shown.stdout
    assert (run / "checkpoints" / "global_step_2").is_dir(), "nothing is deleted without --yes"

    kept_best = cli(
        "ckpt", "prune", str(run), "--keep-last", "1", "--keep-best", "train/loss", "--mode", "max", "--yes"
    )
    assert kept_best.exit_code == 0, kept_best.output
    # the highest train/loss is step 2's: kept as "best", so nothing goes
    assert (run / "checkpoints" / "global_step_2").is_dir() and "Nothing to delete" in kept_best.stdout

    gone = cli("ckpt", "prune", str(run), "--keep-last", "1", "--yes")
    assert gone.exit_code == 0, gone.output
    assert not (run / "checkpoints" / "global_step_2").exists()
    assert (run / "checkpoints" / "global_step_4").is_dir(), "the latest is never deleted"
    assert not list((run / "checkpoints").glob(".*deleting"))
