"""trainctl.launch.checkpoints: the latest checkpoint of a run, and the marker a resume trusts repaired."""

from __future__ import annotations

from pathlib import Path

import torch

from trainctl.launch.checkpoints import latest_checkpoint, repair_marker


def _checkpoint(root: Path, step: int, cut: bool = False) -> Path:
    """A verl FSDP checkpoint's files (tiny tensors), its optimizer file cut short when `cut`."""
    folder = root / f"global_step_{step}"
    folder.mkdir(parents=True)
    for kind in ("model", "optim", "extra_state"):
        torch.save({"w": torch.zeros(4)}, folder / f"{kind}_world_size_1_rank_0.pt")
    if cut:
        path = folder / "optim_world_size_1_rank_0.pt"
        path.write_bytes(path.read_bytes()[:100])
    return folder


def test_a_marker_cut_short_or_naming_an_incomplete_checkpoint_is_repaired(tmp_path):
    root = tmp_path / "checkpoints"
    _checkpoint(root, 1)
    _checkpoint(root, 2)
    _checkpoint(root, 3, cut=True)
    marker = root / "latest_checkpointed_iteration.txt"

    marker.write_text("2")
    assert repair_marker(root) is None, "a marker naming a whole checkpoint is left alone"

    marker.write_text("")  # the disk filled while verl wrote it
    note = repair_marker(root)
    assert marker.read_text() == "2" and "said nothing (cut short" in note and "step 2" in note
    assert latest_checkpoint(root) == root / "global_step_2"

    marker.write_text("3")  # the save it names did not finish
    note = repair_marker(root)
    assert "said step 3, which is gone or incomplete" in note and "step 2." in note and marker.read_text() == "2"


def test_no_marker_is_nothing_to_repair(tmp_path):
    _checkpoint(tmp_path / "checkpoints", 1)
    assert repair_marker(tmp_path / "checkpoints") is None
    assert not (tmp_path / "checkpoints" / "latest_checkpointed_iteration.txt").exists()
