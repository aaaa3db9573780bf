"""Faults inside a running GRPO run (issue 59), the cheap ones, with real processes: the GRPO recipe, 6 steps, a
checkpoint every 2, its checkpoints folder a 6 MiB tmpfs (a checkpoint of the tiny model takes 2.3 MB: two fit).

attempt 1  trainctl's hf rollout server (a Ray actor) is SIGKILLed after the first checkpoint
           -> failed (exit 3) within seconds, the verdict naming the server, its PID and the last whole checkpoint;
           `runs ls`, `runs show` and the server's API say the same
attempt 2  resumed (its first step the checkpoint's + 1): step 4's checkpoint fits, step 6's fills the disk -> failed
           (exit 3), the verdict saying what a checkpoint takes and what is free where; step 6 incomplete, 4 the latest
and in the slow suite, after them:
attempt 3  resumed with a dataloader shorter than the checkpoint's step: verl 0.9.1 skips every epoch and exits 0
           having trained nothing (verl #7401's kind) -> failed (exit 3), "trained nothing"
attempt 4  after `ckpt prune --keep-last 1` -> trains steps 5 and 6 again, from the last whole checkpoint, to the end
The stand-in trainer's faults (a stopped server, a stall, an OOM kill) are tests/launchers/test_vitals.py; a torn
checkpoint's readers tests/ckpt/test_torn.py; the rest (the vLLM engine, a lost Ray node) the slow suite's.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.launch.test_faults import Attempt, status_row
from tests.real_runs import trainctl
from tests.serve.conftest import start_server

NAME = "inside"
STEPS = 6
ARGS = ["recipe=grpo-arith-tiny-cpu", f"run.max_steps={STEPS}", "run.save_every=2", f"run.name={NAME}",
        "logger=console"]  # fmt: skip


@pytest.fixture
def small_disk(isolated):
    """runs/inside/checkpoints on a tmpfs of 6 MiB (made before the run: its folder holds no run yet)."""
    folder = Path.cwd() / "runs" / NAME / "checkpoints"
    folder.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(folder)], capture_output=True,
                             text=True)  # fmt: skip
    if mounted.returncode:
        pytest.skip(f"no tmpfs can be mounted here ({mounted.stderr.strip()}): the full disk needs one")
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=False)


def _killed_server_then_a_full_disk(cli, work: Path, small_disk: Path) -> None:
    """Attempts 1 and 2: the rollout server killed after step 2's checkpoint; resumed, step 4's checkpoint fits on the
    disk, step 6's does not."""
    # checked here first, as a user checks a run before launching it: the launch (and the resume, the same config)
    # reuse the verdict, so their processes do not import verl only to validate (~4 s of CPU a launch)
    checked = cli("train", *ARGS, "--dry-run")
    assert checked.exit_code == 0, checked.output
    first = Attempt(work, trainctl("train", *ARGS), name=NAME)
    first.wait(lambda: first.checkpoint() >= 2, "attempt 1's first checkpoint")
    servers = first.processes("HFRolloutServer", "trainctl's hf rollout server")
    pid = servers[0].pid
    said = first.fails_after(servers[0].kill)
    saved = first.checkpoint()
    assert f"trainctl's hf rollout server (HFRolloutServer, PID {pid}) died at " in said, said[-3000:]
    assert f"the last whole checkpoint is step {saved} (runs/{NAME}/checkpoints/global_step_{saved})" in said
    assert f"trainctl train --resume runs/{NAME}" in said
    assert "failed (exit 1: trainctl's hf rollout server died)" in status_row(cli, NAME)
    shown = cli("runs", "show", f"runs/{NAME}").stdout
    assert f"why:  trainctl's hf rollout server (HFRolloutServer, PID {pid}) died at" in shown, shown
    attempt = json.loads((work / "runs" / NAME / "run.json").read_text())["attempts"][0]
    assert attempt["cause"] == "trainctl's hf rollout server died" and f"step {saved}" in attempt["hint"]

    # the server's API: the run's row and its attempts (the page's table) carry the verdict
    server = start_server([work / "runs"], dict(os.environ), work, log=work.parent / "serve.log")
    try:
        with server.client() as api:
            row = next(r for r in api.get("/api/jobs").json() if r["name"] == NAME)
            assert row["detail"] == "exit 1: trainctl's hf rollout server died", row
            detail = api.get(f"/api/jobs/{row['uuid']}").json()
    finally:
        server.stop()
    assert detail["attempts"][0]["verdict"].startswith("trainctl's hf rollout server (HFRolloutServer"), detail

    # attempt 2: resumed after the last whole checkpoint; step 4's checkpoint fits on the disk, step 6's does not
    second = Attempt(work, trainctl("train", "--resume", f"runs/{NAME}"), name=NAME)
    assert second.finish() == 3
    assert second.steps(2)[0] == saved + 1
    said = " ".join(second.output.decode(errors="replace").split())
    assert (
        "the disk filled up (or a file-size limit was hit) while the trainer wrote (a checkpoint of this run "
        "takes 2.3 MB, as step 4's does; "
        in said
        and f"is free at runs/{NAME}/checkpoints)" in said
    ), said[-3000:]
    assert "the last whole checkpoint is step 4" in said
    assert (small_disk / "latest_checkpointed_iteration.txt").read_text().strip() == "4"
    listed = " ".join(cli("ckpt", "ls", f"runs/{NAME}").stdout.split())
    assert "4 *" in listed and "6 !" in listed, listed


def test_a_killed_rollout_server_and_a_full_disk_get_verdicts_and_the_resume_starts_after_the_last_checkpoint(
    cli, ready, small_disk
):
    _killed_server_then_a_full_disk(cli, Path.cwd(), small_disk)


@pytest.mark.slow  # two more verl starts: the default suite has the two faults above
def test_after_them_a_resume_that_trains_nothing_fails_and_one_with_room_made_ends_the_run_whole(
    cli, ready, small_disk
):
    work = Path.cwd()
    _killed_server_then_a_full_disk(cli, work, small_disk)

    # attempt 3: 8 rows of data, one batch an epoch: verl resumes at epoch 4, past its only one, and ends at once
    third = Attempt(work, trainctl("train", "--resume", f"runs/{NAME}", "data.train_max_samples=8"), name=NAME)
    assert third.finish() == 3
    said = third.output.decode(errors="replace")
    assert (
        f"the resumed attempt ended well but trained nothing: it started from step 4 of {STEPS} and logged no step"
        in said
    ), said[-3000:]
    assert "failed (exit 0: the resumed attempt trained nothing)" in status_row(cli, NAME)

    # attempt 4: the data as it was, room made as the hint says; the remaining steps, from the last whole checkpoint
    pruned = cli("ckpt", "prune", f"runs/{NAME}", "--keep-last", "1", "--yes")
    assert pruned.exit_code == 0 and not (small_disk / "global_step_2").exists(), pruned.output
    fourth = Attempt(work, trainctl("train", "--resume", f"runs/{NAME}", "data.train_max_samples=-1"), name=NAME)
    assert fourth.finish() == 0, fourth.output.decode(errors="replace")[-3000:]
    assert fourth.steps(4) == [5, 6]
    assert "6 *" in " ".join(cli("ckpt", "ls", f"runs/{NAME}").stdout.split())
    status = json.loads((work / "runs" / NAME / "run.json").read_text())
    assert [a["state"] for a in status["attempts"]] == ["failed", "failed", "failed", "finished"]
