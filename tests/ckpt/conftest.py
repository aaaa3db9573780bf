"""Checkpoints made for real once per session: verl SFT at world size 1 and 2, TRL DPO full and LoRA, and a PEFT
adapter laid out the ART way. Tests copy what they damage."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SFT = ["recipe=quickstart", "data.train_max_samples=128", "hardware.micro_batch_size_per_gpu=8", "run.epochs=1"]
SFT += ["run.save_every=2", "run.val_every=2"]
DPO = ["recipe=dpo-arith-tiny-cpu", "run.max_steps=4", "run.save_every=2"]


@pytest.fixture(scope="session")
def made(tmp_path_factory, tiny_model_dir, arith_data_dir) -> Path:
    """A trainctl home with the tiny model and arith data, and a working dir the runs go into."""
    root = tmp_path_factory.mktemp("ckpt")
    shutil.copytree(tiny_model_dir, root / "home" / "models" / "tiny")
    shutil.copytree(arith_data_dir, root / "home" / "data" / "arith")
    (root / "work").mkdir()
    return root


def _train(made: Path, *overrides: str) -> None:
    env = {
        **os.environ,
        "TRAINCTL_HOME": str(made / "home"),
        "TRAINCTL_CACHE": str(made / "cache"),
        "HOME": str(made),
        "WANDB_MODE": "offline",
        "HF_HUB_OFFLINE": "1",
    }
    for var in ("WANDB_API_KEY", "RAY_ADDRESS", "HF_TOKEN"):
        env.pop(var, None)
    proc = subprocess.run(
        [sys.executable, "-m", "trainctl", "train", *overrides],
        cwd=made / "work",
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.fixture(scope="session")
def sft_runs(made, sft_run) -> dict[int, Path]:
    """world size -> a verl SFT run folder with global_step_2 and global_step_4 (world size 1: the session's shared
    SFT run, tests/real_runs.py)."""
    _train(made, *SFT, "hardware.gpus_per_node=2", "run.name=sft-ws2")
    return {1: sft_run.path, 2: made / "work" / "runs" / "sft-ws2"}


@pytest.fixture(scope="session")
def dpo_runs(made, dpo_run) -> dict[str, Path]:
    """full: the session's shared DPO run (checkpoint-8 and -16); lora: checkpoint-2 and -4."""
    _train(made, *DPO, "lora=r16", "run.name=dpo-lora")
    return {"full": dpo_run.path, "lora": made / "work" / "runs" / "dpo-lora"}


def make_adapter(base: Path, out: Path, seed: int, zero: bool = False) -> Path:
    """A LoRA adapter saved by PEFT itself, with non-zero lora_B (a trained one) unless zero=True."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], lora_dropout=0.0)
    peft_model = get_peft_model(model, config)
    if not zero:
        with torch.no_grad():
            for name, p in peft_model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.05)
    peft_model.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def art_model(made, tiny_model_dir) -> Path:
    """ART's layout: models/<run>/{model.json, history.jsonl, checkpoints/0001, checkpoints/0002}."""
    model_dir = made / "art" / "models" / "agent-001"
    for step in (1, 2):
        make_adapter(tiny_model_dir, model_dir / "checkpoints" / f"{step:04d}", seed=step)
    # ART names its base model in model.json; adapter_config.json's base path is made useless on purpose
    for step in (1, 2):
        cfg_path = model_dir / "checkpoints" / f"{step:04d}" / "adapter_config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg["base_model_name_or_path"] = "nobody/not-pulled"
        cfg_path.write_text(json.dumps(cfg))
    (model_dir / "model.json").write_text(json.dumps({"name": "agent-001", "base_model": str(tiny_model_dir)}))
    history = [
        {"step": 1, "recorded_at": "2026-11-01T00:00:00", "train/reward": 0.25},
        {"step": 2, "recorded_at": "2026-11-01T00:01:00", "train/reward": 0.5},
    ]
    (model_dir / "history.jsonl").write_text("".join(json.dumps(h) + "\n" for h in history))
    return model_dir
