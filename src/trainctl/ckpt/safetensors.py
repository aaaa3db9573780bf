"""A safetensors file's header, read without torch: 8 bytes of little-endian length, then that much JSON naming each
tensor's dtype, shape and byte range. Checkpoints, merges, `model info` and the reward-model checks all read it here.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from trainctl.ckpt.layout import CheckpointError


def safetensors_header(path: Path) -> dict:
    """Tensor name -> {dtype, shape, data_offsets} of a .safetensors file; CheckpointError when the file is
    shorter than its header says (a copy or a save that did not finish) or the header is not JSON."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise CheckpointError(f"{path} is truncated ({path.stat().st_size} bytes)")
        (n,) = struct.unpack("<Q", head)
        raw = f.read(n)
    try:
        header = json.loads(raw)
    except ValueError:
        raise CheckpointError(f"{path} has a damaged safetensors header", hint="copy the file again") from None
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    if path.stat().st_size < 8 + n + end:
        raise CheckpointError(
            f"{path} is truncated: {path.stat().st_size:,} bytes, its header needs {8 + n + end:,}",
            hint="copy the file again from where it was saved",
        )
    header.pop("__metadata__", None)
    return header
