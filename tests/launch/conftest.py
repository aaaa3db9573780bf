"""Fixtures for real runs: the model and data in place, and small settings so each run takes seconds."""

from __future__ import annotations

import contextlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import Result, invoke
from tests.real_runs import FAST_DPO, FAST_SFT
from tests.shared import once
from trainctl.metrics import read_metrics

__all__ = ["FAST_DPO", "FAST_SFT"]

# the GRPO recipe at the settings these tests were written for (the recipe's own, 8 samples per prompt at a learning
# rate of 1e-2, are the learning test's: tests/launch/test_faults.py): 4 samples, 1e-4, 2 steps
AT_4 = ["actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.optim.lr=1e-4"]
RUN = ["recipe=grpo-arith-tiny-cpu", "run.max_steps=2", *AT_4]


@pytest.fixture
def ready(tiny_model, arith_data):
    """The tiny model and the arith data where the quickstart looks for them."""
    return tiny_model, arith_data


@dataclass
class Run:
    result: Result
    dir: Path
    dump: Path
    home: Path

    @property
    def metrics(self) -> dict[int, dict]:
        return read_metrics(self.dir)

    def samples(self) -> list[dict]:
        """verl's rollout dump (trainer.rollout_data_dir): every sample of every step, with its score and uid."""
        return [json.loads(line) for f in sorted(self.dump.glob("*.jsonl")) for line in f.read_text().splitlines()]


@contextlib.contextmanager
def own_home(root: Path, tiny_model_dir: Path, arith_data_dir: Path):
    """What the `isolated` fixture does for one test, for a module's run: home, cache, cwd, the model and data."""
    home, work = root / "home", root / "work"
    work.mkdir(parents=True)
    shutil.copytree(tiny_model_dir, home / "models" / "tiny")
    shutil.copytree(arith_data_dir, home / "data" / "arith")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRAINCTL_HOME", str(home))
        mp.setenv("TRAINCTL_CACHE", str(root / "cache"))
        mp.setenv("HOME", str(root))
        mp.setenv("HF_HUB_OFFLINE", "1")
        for var in ("WANDB_API_KEY", "RAY_ADDRESS", "HF_TOKEN", "TRAINCTL_DEBUG"):
            mp.delenv(var, raising=False)
        mp.chdir(work)
        yield home, work, mp


@pytest.fixture(scope="session")
def model_run(tmp_path_factory, tiny_model_dir, tiny_reward_model_dir, arith_data_dir) -> Run:
    """GRPO with reward=model (the tiny reward model) and lora=r8: one run for the reward-model tests
    (tests/launch/test_reward.py) and the GRPO LoRA test (tests/launch/test_lora.py). Its learning rate moves the
    policy far in one step, so that a rollout ignoring the adapters would show."""

    def make(root: Path) -> Run:
        with own_home(root, tiny_model_dir, arith_data_dir) as (home, work, _):
            shutil.copytree(tiny_reward_model_dir, home / "models" / "tiny-rm")
            dump = root / "dump"
            # verl's decoupled mode (the recipe bypasses it in sync): its rollout gap is the LoRA test's evidence
            result = invoke("train", *RUN, "run.name=rm", "reward=model", "reward.model=tiny-rm",
                            "lora=r8", "actor_rollout_ref.actor.optim.lr=2e-2",
                            "algorithm.rollout_correction.bypass_mode=false",
                            f"trainer.rollout_data_dir={dump}")  # fmt: skip
        return Run(result, work / "runs" / "rm", dump, home)

    return once(tmp_path_factory, "reward-model-run", make)
