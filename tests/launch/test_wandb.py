"""The wandb logger, offline: the run's history holds the training loss."""

from __future__ import annotations

from tests.launch.conftest import FAST_SFT
from tests.launch.wandb_records import history


def test_wandb_offline_run_has_the_training_loss(cli, ready, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    result = cli("train", *FAST_SFT, "logger=wandb", "run.name=wb", "run.max_steps=3")
    assert result.exit_code == 0, result.output
    files = list((tmp_path / "work" / "runs" / "wb" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1
    rows = history(files[0])
    losses = [r["train/loss"] for r in rows if "train/loss" in r]
    assert len(losses) == 3 and all(isinstance(v, float) for v in losses)
