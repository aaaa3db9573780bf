"""Checkpoints made for real once per session: verl SFT at world size 1 and 2, TRL DPO full and LoRA, and a PEFT
adapter laid out the ART way. Tests copy what they damage."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.real_runs import SFT_STEPS


@pytest.fixture(scope="session")
def made(tmp_path_factory, tiny_model_dir, arith_data_dir) -> Path:
    """A trainctl home with the tiny model and arith data, and a working dir the runs go into."""
    root = tmp_path_factory.mktemp("ckpt")
    shutil.copytree(tiny_model_dir, root / "home" / "models" / "tiny")
    shutil.copytree(arith_data_dir, root / "home" / "data" / "arith")
    (root / "work").mkdir()
    return root


# world size -> the last step of the session's SFT run of that world size (each saves a checkpoint there)
LAST = {1: SFT_STEPS, 2: 4}


@pytest.fixture(scope="session")
def sft_runs(sft_run, sft_ws2_run) -> dict[int, Path]:
    """world size -> a verl SFT run folder: the session's shared SFT runs (tests/real_runs.py), with checkpoints
    every SFT_EVERY steps to SFT_STEPS (world size 1) and at steps 2 and 4 (world size 2)."""
    return {1: sft_run.path, 2: sft_ws2_run.path}


@pytest.fixture(scope="session")
def dpo_runs(dpo_run, dpo_lora_run) -> dict[str, Path]:
    """The session's shared DPO runs: full and lora=r8, each with checkpoint-8 and -16."""
    return {"full": dpo_run.path, "lora": dpo_lora_run.path}


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
