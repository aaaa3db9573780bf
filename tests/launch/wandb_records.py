"""Reading a wandb offline run's history (wandb 0.31 ships no Python reader for .wandb files).

The file is a 7-byte header (":W&B", magic, version) followed by LevelDB-log records (32 KiB blocks; each record
a 7-byte header: crc32, length, type) whose payloads are wandb.proto Record messages.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

BLOCK = 32768
HEADER = 7


def _payloads(data: bytes):
    pos, pending = HEADER, b""
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            pos += BLOCK - pos % BLOCK if pos % BLOCK else 0
            continue
        if kind == 1:
            yield chunk
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            yield pending + chunk
            pending = b""


def history(path: Path) -> list[dict]:
    """Each logged step of a .wandb file, as {key: value}."""
    from wandb.proto import wandb_internal_pb2 as pb

    rows = []
    for payload in _payloads(Path(path).read_bytes()):
        rec = pb.Record()
        rec.ParseFromString(payload)
        if rec.WhichOneof("record_type") == "history":
            rows.append({(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in rec.history.item})
    return rows
