"""One real GRPO run on the CPU shared by the eval tests (60-100 s): 2 steps, a checkpoint at each, verl validating
before training and after each step, its validation samples dumped (trainer.validation_data_dir)."""

from __future__ import annotations

from pathlib import Path

import pytest

REWARD = Path(__file__).with_name("text_reward.py")
REWARD_ARGS = ["reward=fn", f"reward.fn={REWARD}:compute_score"]


@pytest.fixture(scope="session")
def grpo_run(tmp_path_factory, tiny_model_dir, arith_data_dir) -> Path:
    import shutil

    from tests.conftest import invoke

    root = tmp_path_factory.mktemp("eval-run")
    home, work = root / "home", root / "work"
    shutil.copytree(tiny_model_dir, home / "models" / "tiny")
    shutil.copytree(arith_data_dir, home / "data" / "arith")
    work.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRAINCTL_HOME", str(home))
        mp.setenv("HOME", str(root))
        mp.setenv("WANDB_MODE", "offline")
        mp.chdir(work)
        result = invoke(
            "train",
            "recipe=grpo-arith-tiny-cpu",
            "run.name=grpo",
            "run.max_steps=2",
            "run.save_every=1",
            "run.val_every=1",
            *REWARD_ARGS,
            f"trainer.validation_data_dir={root / 'validation'}",
        )
    assert result.exit_code == 0, result.output[-4000:]
    run = work / "runs" / "grpo"
    assert (run / "checkpoints" / "global_step_2").is_dir() and (run / "checkpoints" / "global_step_1").is_dir()
    return run
