"""GPU runs: a ~76M-parameter model built locally (random weights, the tiny tokenizer) and the arith data.

The tests here run only on a machine with a CUDA GPU (`make test-gpu`, or `pytest -m gpu tests/gpu`); elsewhere
they are collected and skipped. Every model and file is built here: the GPU machines have no internet.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

# head size 64 (hidden 768 / 12 heads): what vLLM's and FlashAttention's kernels support; 12 layers
MID_ARCH = {
    "type": "Qwen2ForCausalLM",
    "hidden_size": 768,
    "layers": 12,
    "heads": 12,
    "kv_heads": 4,
    "intermediate_size": 2048,
    "vocab_size": 512,
    "tie_embeddings": True,
}


def cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.fixture(scope="session")
def mid_model_dir(session_dir) -> Path:
    from trainctl.models.tiny import build_model, build_tokenizer

    out = session_dir / "models" / "mid"
    if not (out / "config.json").is_file():
        tok = build_tokenizer()
        model = build_model(tok, seed=1, arch=MID_ARCH)
        tok.save_pretrained(out)
        model.save_pretrained(out, safe_serialization=True)
    return out


@pytest.fixture
def gpu_ready(tiny_model, arith_data, mid_model_dir, isolated) -> Path:
    """The mid model where model.path points in these tests, next to the tiny model and the arith data."""
    target = isolated / "models" / "mid"
    shutil.copytree(mid_model_dir, target)
    return target


def report(name: str, **figures) -> None:
    """Figures a GPU test measured, appended to $TRAINCTL_GPU_REPORT (JSON lines) for the developer's note."""
    path = os.environ.get("TRAINCTL_GPU_REPORT")
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps({"test": name, **figures}) + "\n")
