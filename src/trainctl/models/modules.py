"""The layers of a model's architecture that LoRA can adapt, by name (`q_proj`, `down_proj`, ...).

Read from the architecture itself, not from a table: transformers builds the model class from its config on the meta
device (no memory, no weights) and the module names are read
off it. The answer depends only on the architecture class and the transformers version, so it is cached on disk
(building the meta model imports torch and transformers: seconds, once).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from trainctl import paths


@dataclass(frozen=True)
class Modules:
    """Leaf module names (the last part of the dotted name) of one architecture."""

    architecture: str
    linear: tuple[str, ...]  # nn.Linear inside the decoder blocks: what PEFT's all-linear adapts
    other: tuple[str, ...]  # other layers LoRA can adapt when named (the output layer, embeddings)

    @property
    def names(self) -> tuple[str, ...]:
        return (*self.linear, *self.other)


def _cache_file(architecture: str) -> Path:
    import importlib.metadata

    version = importlib.metadata.version("transformers")
    return paths.cache_dir() / "modules" / f"{architecture}-{version}.json"


def modules(architecture: str, config: dict | None = None) -> Modules:
    """The adaptable layers of an architecture class (`Qwen2ForCausalLM`); `config` is the model's config.json
    when there is one (needed for architectures transformers cannot build from its defaults)."""
    cache = _cache_file(architecture)
    if cache.is_file():
        try:
            data = json.loads(cache.read_text())
            return Modules(architecture, tuple(data["linear"]), tuple(data["other"]))
        except (ValueError, KeyError):
            pass
    found = _read_modules(architecture, config)
    paths.atomic_write_text(cache, json.dumps({"linear": found.linear, "other": found.other}))
    return found


def _read_modules(architecture: str, config: dict | None) -> Modules:
    import torch
    import transformers
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    model_type = (config or {}).get("model_type") or next(
        (t for t, cls in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items() if cls == architecture), None
    )
    cls = getattr(transformers, architecture, None)
    if model_type is None or cls is None:
        raise LookupError(f"transformers {transformers.__version__} has no causal LM class {architecture}")
    if config:  # the model's own config, whole (per-layer lists must match the layer count; meta costs nothing)
        cfg = AutoConfig.for_model(model_type, **{k: v for k, v in config.items() if k != "model_type"})
    else:  # the architecture's defaults, one layer: every layer has the same modules
        cfg = AutoConfig.for_model(model_type, num_hidden_layers=1)
    with torch.device("meta"):
        model = cls(cfg)
    blocks: list[str] = []
    other: list[str] = []
    output = model.get_output_embeddings()
    for name, module in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if isinstance(module, torch.nn.Linear) and module is not output and ".layers." in f".{name}.":
            if leaf not in blocks:
                blocks.append(leaf)
        elif isinstance(module, torch.nn.Linear | torch.nn.Embedding) and leaf not in other:
            other.append(leaf)
    other = [o for o in other if o not in blocks]
    return Modules(architecture, tuple(blocks), tuple(other))


def model_modules(path: str | Path, architecture: str | None) -> Modules | None:
    """The adaptable layers of a model: from its folder's config.json when pulled, else its option's architecture
    class; None when neither says (a folder with no config.json and no architecture)."""
    folder = Path(path).expanduser()
    config = None
    if (folder / "config.json").is_file():
        config = json.loads((folder / "config.json").read_text())
        architecture = (config.get("architectures") or [architecture])[0]
    if not architecture:
        return None
    return modules(architecture, config)
