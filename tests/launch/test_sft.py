"""SFT for real: verl's sft_trainer under torchrun on CPU, through trainctl's verl plugin."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.launch.conftest import FAST_SFT
from tests.real_runs import SECRET
from trainctl.metrics import read_metrics, series


def _file_size_limit(size: int):
    def limit() -> None:  # in the child: no file it (or anything it starts) writes grows beyond `size` bytes
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    return limit


@pytest.mark.slow  # two more verl starts (a minute in the suite); the failing run below is in the default suite
def test_sft_trains_checkpoints_survives_a_full_disk_and_resumes_across_an_epoch_boundary(cli, ready, tmp_path):
    # 4 steps, one epoch, checkpoints at 2 and 4
    first = cli("train", *FAST_SFT, "run.save_every=2", "run.val_every=2", "run.name=sft")
    assert first.exit_code == 0, first.output[-3000:]
    run = tmp_path / "work" / "runs" / "sft"
    assert (run / "checkpoints" / "global_step_4" / "model_world_size_1_rank_0.pt").is_file()
    assert "Latest checkpoint: runs/sft/checkpoints/global_step_4" in first.stdout
    losses = [v for _, v in series(read_metrics(run), "train/loss")]
    assert len(losses) == 4 and losses[-1] < losses[0], losses

    # the disk fills up while step 6's checkpoint is written (a file-size limit: the model shard fits, the optimizer
    # state does not): the trainer fails, trainctl says why, the latest marker stays at 4 and the cut checkpoint is
    # marked incomplete, never resumed from or merged
    full = subprocess.run(
        [sys.executable, "-m", "trainctl", "train", "--resume", "runs/sft", "run.epochs=2"],
        cwd=tmp_path / "work", capture_output=True, text=True, timeout=600, preexec_fn=_file_size_limit(1_000_000),
    )  # fmt: skip
    assert full.returncode == 3, full.stdout + full.stderr
    assert "the disk filled up (or a file-size limit was hit) while the trainer wrote" in full.stderr
    checkpoints = run / "checkpoints"
    assert (checkpoints / "latest_checkpointed_iteration.txt").read_text().strip() == "4"
    listed = cli("ckpt", "ls", "runs/sft")
    assert "6 !" in listed.stdout and "4 *" in listed.stdout, listed.stdout
    assert "Incomplete: global_step_6: optim_world_size_1_rank_0.pt is cut short" in " ".join(listed.stdout.split())
    # what picks a checkpoint of the run (merge, eval, best) takes the newest whole one
    merge = cli("ckpt", "merge", "runs/sft", "--out", str(tmp_path / "merged"))
    assert merge.exit_code == 0 and "global_step_4 (verl-fsdp, step 4)" in merge.stderr, merge.output

    # step 4 ends epoch 1: raw verl would now skip epoch 2 and exit 0 without training
    second = cli("train", "--resume", "runs/sft", "run.epochs=2")
    assert second.exit_code == 0, second.output
    assert "the end of epoch 1: verl 0.9.1 would skip the next epoch" in second.stderr
    assert (run / "checkpoints" / "global_step_8").is_dir()
    assert not cli("ckpt", "ls", "runs/sft").stdout.count("!"), "step 6 saved again, whole"
    third = (run / "metrics" / "attempt-3.jsonl").read_text().splitlines()
    assert json.loads(third[0])["step"] == 5, "attempt 3 starts after the last whole checkpoint (4)"
    steps = [s for s, _ in series(read_metrics(run), "train/loss")]
    assert steps == [1, 2, 3, 4, 5, 6, 7, 8]
    status = json.loads((run / "run.json").read_text())
    assert [a["state"] for a in status["attempts"]] == ["finished", "failed", "finished"]

    done = cli("train", "--resume", "runs/sft", "run.epochs=2")
    assert done.exit_code == 0
    assert "the run is complete: step 8 of 8" in done.stderr


def test_sft_with_two_processes(sft_ws2_run):
    step = sft_ws2_run.path / "checkpoints" / "global_step_4"  # the session's shared run (tests/real_runs.py)
    shards = sorted(p.name for p in step.glob("model_world_size_2_rank_*.pt"))
    assert shards == ["model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt"]
    assert json.loads((step / "fsdp_config.json").read_text())["world_size"] == 2


def test_run_folder_holds_config_command_lockfile_and_no_secrets(failed_run):
    # the session's failing run (tests/real_runs.py), started with HF_TOKEN set and a token-like run.project: what
    # a run saves is written before its trainer starts
    run = failed_run.path
    assert {"trainctl.yaml", "verl_sft.yaml", "command.sh", "lock.json", "run.json"} <= {p.name for p in run.iterdir()}
    lock = json.loads((run / "lock.json").read_text())
    assert {"trainctl", "verl", "torch", "transformers", "trl", "ray"} <= set(lock["packages"])
    assert lock["python"]
    backend = yaml.safe_load((run / "verl_sft.yaml").read_text())
    assert backend["trainer"]["total_training_steps"] == 1
    command = (run / "command.sh").read_text()
    assert "-m verl.trainer.sft_trainer" in command and "export VERL_PLATFORM=cpu" in command
    for f in [*run.rglob("*.yaml"), *run.rglob("*.json"), *run.rglob("*.sh"), *run.rglob("*.log")]:
        assert SECRET not in f.read_text(errors="replace"), f
    assert SECRET not in failed_run.output


def test_the_trainers_temporary_files_go_to_a_folder_of_the_attempts_own_removed_at_its_end(failed_run, real_home):
    """The failing run's dataset class (in the trainer torchrun started) wrote down where Python's tempfile puts
    files there: a folder of the attempt's own under trainctl's cache (trainctl.scratch), not /tmp, where verl's
    checkpoint locks, torchrun's logs and wandb's staging were left; gone once the run ended. Ray's session folder
    and inductor's compile cache keep their places."""
    seen = json.loads((real_home.root / "boom-tmp.json").read_text())
    folder = Path(seen["tempdir"])
    cache = folder.parent.parent  # the run's trainctl cache (tests/real_runs.py: cache-NAME)
    assert folder.parent.name == "tmp" and cache == real_home.root / "cache-boom", seen
    assert folder.name.split("-")[1].isdigit(), seen  # HOST-PID
    assert seen["env"]["TMPDIR"] == str(folder) and seen["env"]["RAY_TMPDIR"] == "/tmp", seen
    inductor = Path(seen["env"]["TORCHINDUCTOR_CACHE_DIR"])
    assert inductor.name.startswith("torchinductor_") and inductor.parent != folder, seen
    assert not folder.exists(), "removed when the attempt ended"


def test_an_existing_run_is_not_overwritten(cli, ready, tmp_path):
    (tmp_path / "work" / "runs" / "quickstart").mkdir(parents=True)
    (tmp_path / "work" / "runs" / "quickstart" / "run.json").write_text('{"state": "finished", "attempts": []}')
    result = cli("train", *FAST_SFT)
    assert result.exit_code == 1
    assert "Error: runs/quickstart already holds a run (state: finished)." in result.stderr
    assert "Hint: resume it: trainctl train --resume runs/quickstart; or start another: run.name=quickstart-2" in (
        result.stderr
    )
    # the refusal lets go of the run's lock: the same process asking again is told the same, not that it is in use
    again = cli("train", *FAST_SFT)
    assert again.exit_code == 1 and "already holds a run" in again.stderr, again.stderr


def test_a_failing_trainer_reports_its_exit_code_and_log_tail(failed_run):
    # the session's failing run (tests/real_runs.py): its exit code was 3
    out = failed_run.output
    assert "Error: the trainer exited with code 1. Last lines of its log:" in out
    assert "RuntimeError: boom: bad dataset" in out
    assert "Hint: the whole log is in runs/boom/logs/" in out
    status = json.loads((failed_run.path / "run.json").read_text())
    assert status["state"] == "failed" and status["attempts"][0]["exit_code"] == 1


def test_missing_model_is_an_error_before_anything_starts(cli, arith_data, no_processes):
    result = cli("train", *FAST_SFT)
    assert result.exit_code == 1
    assert "Hint: run: trainctl model init tiny" in result.stderr
    assert not no_processes
