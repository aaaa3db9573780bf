"""Page release is safe: only shard-file mappings are given back, and their data reads the same afterwards."""

from __future__ import annotations

import torch

from trainctl.ckpt import tensors


def test_release_never_touches_memory_outside_a_shard_mapping(tmp_path):
    shard = tmp_path / "model_world_size_1_rank_0.pt"
    torch.save({"w": torch.arange(300_000, dtype=torch.float32)}, shard)
    mapped = tensors.load_shard(shard)["w"]
    tensors.note_mappings([shard])
    computed = torch.arange(300_000, dtype=torch.float32) * 2  # anonymous memory: MADV_DONTNEED would zero it
    tensors.release(computed)
    tensors.release(mapped)
    assert torch.equal(computed, torch.arange(300_000, dtype=torch.float32) * 2)
    assert torch.equal(mapped, torch.arange(300_000, dtype=torch.float32)), "released pages are read back"
