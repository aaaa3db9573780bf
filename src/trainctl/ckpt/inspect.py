"""`trainctl ckpt show`: what a checkpoint holds, read from headers and memory-mapped, weights-only loads
(inspecting a checkpoint never unpickles code and never reads the tensors' data)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from trainctl.ckpt.layout import Checkpoint, Part, list_checkpoints

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


@dataclass
class PartDetails:
    part: Part
    config: dict | None
    config_path: Path | None
    tokenizer: bool
    chat_template: bool
    tensors: int
    params: int
    dtypes: dict[str, int]  # dtype -> tensor count
    files: list[tuple[str, int]] = field(default_factory=list)  # name, bytes
    lora_tensors: int = 0
    base_model: str | None = None


@dataclass
class Details:
    checkpoint: Checkpoint
    parts: list[PartDetails]


def _chat_template(folder: Path | None) -> bool:
    if folder is None:
        return False
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file():
        return True
    tc = folder / "tokenizer_config.json"
    try:
        return bool(tc.is_file() and json.loads(tc.read_text()).get("chat_template"))
    except ValueError:
        return False


def _tensor_table(part: Part) -> tuple[int, int, Counter, int]:
    """(tensor count, parameter count, dtype counts, LoRA tensors) from rank 0 or the safetensors headers."""
    from math import prod

    from trainctl.ckpt.tensors import FsdpSource, safetensors_header, weight_files

    dtypes: Counter = Counter()
    if part.kind == "fsdp":
        src = FsdpSource(part)  # every rank opened: catches missing/truncated shards; data is not read
        specs = list(src.specs.values())
        shapes = [(s.name, s.shape, str(s.dtype).removeprefix("torch.")) for s in specs]
    else:
        files = (
            sorted(part.path.glob("adapter_model*.safetensors")) if part.kind == "adapter" else weight_files(part.path)
        )
        shapes = []
        for f in files:
            for name, v in safetensors_header(f).items():
                shapes.append((name, tuple(v["shape"]), v["dtype"]))
    for _, _, dt in shapes:
        dtypes[dt] += 1
    params = sum(prod(s) for _, s, _ in shapes)
    lora = sum(1 for n, _, _ in shapes if "lora_" in n)
    return len(shapes), params, dtypes, lora


def details(target: Path) -> Details:
    ckpt = list_checkpoints(target).latest
    out = []
    for part in ckpt.parts:
        hf = part.hf_dir
        config_path = hf / "config.json" if hf and (hf / "config.json").is_file() else None
        config = json.loads(config_path.read_text()) if config_path else None
        base = None
        if part.kind == "adapter":
            try:
                base = json.loads((part.path / "adapter_config.json").read_text()).get("base_model_name_or_path")
            except ValueError:
                base = None
        n, params, dtypes, lora = _tensor_table(part)
        files = sorted((f.name, f.stat().st_size) for f in part.path.iterdir() if f.is_file())
        tok = bool(hf and any((hf / t).is_file() for t in _TOKENIZER_FILES))
        out.append(
            PartDetails(part, config, config_path, tok, _chat_template(hf), n, params, dict(dtypes), files, lora, base)
        )
    return Details(ckpt, out)
