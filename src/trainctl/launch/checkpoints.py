"""Finding a run's latest checkpoint (verl's global_step_N, TRL's checkpoint-N)."""

from __future__ import annotations

import re
from pathlib import Path


def latest_checkpoint(checkpoints: Path) -> Path | None:
    marker = checkpoints / "latest_checkpointed_iteration.txt"
    if marker.is_file():
        step = marker.read_text().strip()
        path = checkpoints / f"global_step_{step}"
        if path.is_dir():
            return path
    steps = []
    for p in checkpoints.glob("*") if checkpoints.is_dir() else []:
        m = re.fullmatch(r"(?:global_step_|checkpoint-)(\d+)", p.name)
        if m and p.is_dir():
            steps.append((int(m.group(1)), p))
    return max(steps)[1] if steps else None


def repair_marker(checkpoints: Path) -> str | None:
    """Before a resume: make verl's latest_checkpointed_iteration.txt name the newest whole checkpoint.

    verl's PPO trainer writes the marker in place after a save: a disk that fills at that instant leaves it empty, and
    verl's resume then fails on it. A marker that is unreadable, or names a checkpoint that is gone or incomplete
    (trainctl.ckpt.layout), is rewritten (atomically) to the newest whole checkpoint. Returns what was done, or None.
    """
    from trainctl.ckpt.layout import CheckpointError, list_checkpoints
    from trainctl.paths import atomic_write_text

    marker = checkpoints / "latest_checkpointed_iteration.txt"
    if not marker.is_file():
        return None  # a TRL run, or no checkpoint yet: nothing of verl's to repair
    try:
        listing = list_checkpoints(checkpoints)
    except CheckpointError:
        return None
    whole = [c for c in listing.checkpoints if not c.incomplete and c.step is not None]
    text = marker.read_text().strip()
    if any(str(c.step) == text for c in whole) or not whole:
        return None
    newest = whole[-1]
    atomic_write_text(marker, str(newest.step))
    said = (
        f"step {text}, which is gone or incomplete" if text else "nothing (cut short: the disk filled as verl wrote it)"
    )
    return f"verl's latest-checkpoint marker said {said}; it now names the newest whole checkpoint, step {newest.step}."
