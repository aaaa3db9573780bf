"""Every run keeps its own record whatever the logger, and leaves nothing outside its run folder.

SFT, DPO and GRPO run once per session with logger=console (and two-process SFT with logger=[wandb,tensorboard],
wandb offline) from a clean working directory each (tests/real_runs.py); the tests here read what they left.
"""

from __future__ import annotations

import json

import pytest

from tests.launch.wandb_records import history
from tests.real_runs import GRPO_EVERY, GRPO_STEPS, SFT_EVERY, SFT_STEPS
from trainctl.metrics import read_jsonl, read_metrics, series

# run fixture -> (a metric the trainer logs under its own name, the checkpoint steps, the summary's first line)
RUNS = {
    "sft_run": ("train/loss", list(range(SFT_EVERY, SFT_STEPS + 1, SFT_EVERY)), f"train/loss over {SFT_STEPS} steps: "),
    "dpo_run": ("train/loss", [8, 16], "train/loss over 16 steps: "),
    "grpo_run": ("critic/score/mean", [GRPO_EVERY, GRPO_STEPS], f"critic/score/mean over {GRPO_STEPS} steps: "),
    "sft_ws2_run": ("train/loss", [2, 4], "train/loss over 4 steps: "),
}


@pytest.mark.parametrize("fixture", list(RUNS))
def test_the_run_records_its_metrics_and_leaves_nothing_outside_its_folder(fixture, request, cli):
    run = request.getfixturevalue(fixture)
    metric, steps, summary = RUNS[fixture]
    assert sorted(p.name for p in run.work.iterdir()) == ["runs"], "nothing outside the run folder"
    assert sorted(p.name for p in (run.path.parent).iterdir()) == [run.path.name]

    records = read_jsonl(run.path / "metrics" / "attempt-1.jsonl")
    assert steps[-1] in records and metric in records[steps[-1]], sorted(records.get(steps[-1], {}))[:20]
    assert summary in run.output, run.output[-2000:]

    listed = cli("ckpt", "ls", str(run.path), "-m", metric)
    assert listed.exit_code == 0, listed.output
    folder = "checkpoint-" if fixture == "dpo_run" else "global_step_"
    for step in steps:
        row = next(line for line in listed.stdout.splitlines() if line.rstrip().endswith(f"{folder}{step}"))
        assert f"{metric}=" in row, row

    best = cli("ckpt", "best", str(run.path), "--metric", metric)
    assert best.exit_code == 0, best.output
    values = {s: v for s, v in series(read_metrics(run.path), metric) if s in steps}
    pick = (min if "loss" in metric else max)(values, key=values.get)
    assert best.stdout.strip().endswith(f"{folder}{pick}"), (values, best.stdout)


def test_a_metric_the_run_never_logged_is_an_error_that_lists_the_logged_ones(grpo_run, cli, tmp_path):
    # the README used to show val/loss for GRPO runs; the PPO family never logs it
    for args in (
        ["ckpt", "ls", str(grpo_run.path), "-m", "val/loss"],
        ["ckpt", "best", str(grpo_run.path), "--metric", "val/loss"],
        ["ckpt", "prune", str(grpo_run.path), "--keep-last", "1", "--keep-best", "val/loss"],
    ):
        result = cli(*args)
        assert result.exit_code == 1, result.output
        err = result.stderr
        assert f"Error: {grpo_run.path} never logged the metric 'val/loss'." in err, err
        assert "Metrics logged (" in err and "critic/score/{" in err and "actor/" in err
        assert "Hint: trainctl ckpt" in err
    assert (grpo_run.path / "checkpoints" / f"global_step_{GRPO_EVERY}").is_dir(), "nothing was pruned"

    typo = cli("ckpt", "best", str(grpo_run.path), "--metric", "critic/score/maen")
    assert "Did you mean 'critic/score/mean'?" in typo.stderr
    assert f"Hint: trainctl ckpt best {grpo_run.path / 'checkpoints'} --metric critic/score/mean" in typo.stderr


def test_several_loggers_add_to_the_record(sft_ws2_run):
    run = sft_ws2_run.path
    config = json.loads((run / "run.json").read_text())
    assert config["state"] == "finished"
    backend = (run / "verl_sft.yaml").read_text()
    assert "logger:\n  - console\n  - file\n  - wandb\n  - tensorboard\n" in backend
    files = list((run / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1
    losses = [r["train/loss"] for r in history(files[0]) if "train/loss" in r]
    assert len(losses) == 4 and all(isinstance(v, float) for v in losses)
    assert list((run / "tensorboard").rglob("events.out.tfevents.*")), "TensorBoard writes into the run folder"
    # the same numbers in the run's own record
    ours = [v for _, v in series(read_metrics(run), "train/loss")]
    assert ours == pytest.approx(losses)


def test_the_command_file_says_what_it_runs(dpo_run, sft_run):
    dpo = (dpo_run.path / "command.sh").read_text()
    assert "-m trainctl.runtime.trl_entry --trainer dpo --config" in dpo
    assert "TRL has no command of its own for this run" in dpo and "The same run with" not in dpo
    sft = (sft_run.path / "command.sh").read_text()
    assert "# The same run with verl sft_trainer alone" in sft
    assert f"hydra.run.dir={sft_run.path}" in sft and "hydra.output_subdir=null" in sft
