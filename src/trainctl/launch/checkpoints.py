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
