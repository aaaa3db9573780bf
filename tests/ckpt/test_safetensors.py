"""One safetensors header reader (trainctl.ckpt.safetensors) for checkpoints, merges, `model info` and the reward
model checks: what a file holds, and a clear error for one that was cut short."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from trainctl.ckpt.layout import CheckpointError
from trainctl.ckpt.safetensors import safetensors_header
from trainctl.models.info import safetensors_params


def test_the_header_names_each_tensor_and_a_cut_file_is_an_error(tmp_path):
    f = tmp_path / "model.safetensors"
    save_file({"score.weight": torch.zeros(1, 8), "embed.weight": torch.zeros(4, 8, dtype=torch.bfloat16)}, f)
    header = safetensors_header(f)
    assert {k: (v["dtype"], v["shape"]) for k, v in header.items()} == {
        "embed.weight": ("BF16", [4, 8]),
        "score.weight": ("F32", [1, 8]),
    }
    assert safetensors_params(tmp_path) == (40, "bfloat16")
    f.write_bytes(f.read_bytes()[:-16])
    with pytest.raises(CheckpointError, match="is truncated"):
        safetensors_header(f)
    with pytest.raises(CheckpointError, match="is truncated"):
        safetensors_params(tmp_path)
