"""A checkpoint torn by a crash while it was written (issue 59), in a copy of the session's real GRPO run (whole
checkpoints at steps 6 and 12; tests/real_runs.py): its step 12 left as a SIGKILL of the trainer leaves it.

verl 0.9.1 saves a PPO step as: the actor's model, optimizer and extra-state shards, its huggingface/ config, then
data.pt (the dataloader's state), then latest_checkpointed_iteration.txt. Killed while the optimizer file was being
written, step 12 has an optimizer file cut short and no data.pt, and the marker still names step 6; killed after the
shards but before data.pt, every file it has is whole. Either way, nothing that picks "the latest" or "the best"
checkpoint takes it: `ckpt ls`, `runs show`, `ckpt merge`, `ckpt best`, `eval` each name it as incomplete and use
step 6, and a resume's marker repair keeps step 6 (the real kill during a save: tests/launch/test_faults.py, slow).
"""

from __future__ import annotations

import shutil

import pytest

from tests.real_runs import GRPO_EVERY
from trainctl.launch.checkpoints import repair_marker


@pytest.fixture(params=["optimizer cut short", "no data.pt"])
def torn(request, grpo_run, tmp_path):
    run = shutil.copytree(grpo_run.path, tmp_path / "work" / "runs" / "grpo")
    step = run / "checkpoints" / f"global_step_{2 * GRPO_EVERY}"
    (step / "data.pt").unlink()
    if request.param == "optimizer cut short":
        optim = step / "actor" / "optim_world_size_1_rank_0.pt"
        optim.write_bytes(optim.read_bytes()[: optim.stat().st_size // 2])
        (step / "actor" / "extra_state_world_size_1_rank_0.pt").unlink()
    (run / "checkpoints" / "latest_checkpointed_iteration.txt").write_text(str(GRPO_EVERY))
    return run, request.param


def test_nothing_takes_a_torn_checkpoint_for_the_latest_or_the_best(cli, torn, arith_data, tmp_path, monkeypatch):
    run, how = torn
    monkeypatch.chdir(run.parent.parent)
    why = "optim_world_size_1_rank_0.pt is cut short" if how == "optimizer cut short" else "data.pt is missing"

    listed = cli("ckpt", "ls", "runs/grpo")
    assert listed.exit_code == 0, listed.output
    flat = " ".join(listed.stdout.split())
    assert "6 *" in flat and "12 !" in flat and f"Incomplete: global_step_12: {why}" in flat, listed.stdout
    shown = cli("runs", "show", "runs/grpo").stdout
    assert "step 6 *" in shown and f"step 12  runs/grpo/checkpoints/global_step_12  incomplete: {why}" in shown, shown

    passed = f"Note: passed over global_step_12: {why}"
    merged = cli("ckpt", "merge", "runs/grpo", "--out", str(tmp_path / "merged"))
    assert merged.exit_code == 0 and "global_step_6 (verl-ppo, step 6)" in merged.stderr, merged.output
    assert passed in merged.stderr
    # step 12's reward is the run's highest: the best whole one is step 6
    best = cli("ckpt", "best", "runs/grpo", "--metric", "critic/score/mean")
    assert best.exit_code == 0 and best.stdout.strip().endswith("global_step_6"), best.output
    assert passed in best.stderr
    # named on its own, its model shard (whole in both cases) can be salvaged, and the merge says what it is
    direct = cli("ckpt", "merge", "runs/grpo/checkpoints/global_step_12", "--out", str(tmp_path / "m12"))
    assert direct.exit_code == 0 and f"this checkpoint is incomplete ({why}" in direct.stderr, direct.output

    evaluated = cli("eval", "runs/grpo", "--limit", "4")
    assert evaluated.exit_code == 0, evaluated.output
    assert "step 6" in evaluated.stdout and "step 12" not in evaluated.stdout and passed in evaluated.stderr, (
        evaluated.output
    )

    # a resume starts from step 6: the marker already names it, and stays
    assert repair_marker(run / "checkpoints") is None
    assert (run / "checkpoints" / "latest_checkpointed_iteration.txt").read_text() == "6"
