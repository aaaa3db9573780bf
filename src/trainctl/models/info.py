"""`trainctl model info`: what a model is, read from its folder (config.json, safetensors headers, tokenizer config)
or, when it is not pulled yet, from its model option."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from trainctl.models.catalog import ModelError, folder_size, on_disk, resolve_ref

if TYPE_CHECKING:
    from trainctl.config.schema import Model
    from trainctl.config.search import SearchPath

# bytes per element of each safetensors dtype
DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "BF16": 2,
    "F16": 2,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I64": 8,
    "I32": 4,
    "I8": 1,
    "U8": 1,
}
DTYPE_NAMES = {
    "F32": "float32",
    "BF16": "bfloat16",
    "F16": "float16",
    "F8_E4M3": "float8_e4m3",
    "F8_E5M2": "float8_e5m2",
}


@dataclass
class ModelInfo:
    name: str
    path: Path
    on_disk: bool
    architecture: str
    params: int
    params_how: str
    dtype: str | None
    hidden_size: int
    layers: int
    heads: int
    kv_heads: int
    intermediate_size: int
    vocab_size: int
    tie_embeddings: bool
    context_length: int | None
    chat_template: bool | None  # None: unknown (not on disk)
    size_bytes: int = 0
    complete: bool | None = None

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size * (1 if self.tie_embeddings else 2)

    @property
    def layer_params(self) -> int:
        return max(0, (self.params - self.embedding_params) // max(self.layers, 1))


def safetensors_params(folder: Path) -> tuple[int, str | None]:
    """Parameters and the dominant dtype, from the safetensors headers alone."""
    from trainctl.ckpt.safetensors import safetensors_header

    total = 0
    dtypes: Counter = Counter()
    for f in sorted(folder.glob("*.safetensors")):
        for t in safetensors_header(f).values():
            n = 1
            for d in t["shape"]:
                n *= d
            total += n
            dtypes[t["dtype"]] += n
    dtype = DTYPE_NAMES.get(dtypes.most_common(1)[0][0]) if dtypes else None
    return total, dtype


def params_from_arch(a: dict) -> int:
    """A dense decoder's parameter count from its shape (attention with biases on q/k/v, as Qwen2 has)."""
    h, i, layers, v = a["hidden_size"], a["intermediate_size"], a["layers"], a["vocab_size"]
    head_dim = h // a["heads"]
    kv = a["kv_heads"] * head_dim
    attn = h * h + 2 * h * kv + h * h + h + 2 * kv
    mlp = 3 * h * i
    per_layer = attn + mlp + 2 * h
    return v * h * (1 if a.get("tie_embeddings") else 2) + layers * per_layer + h


def _config(folder: Path) -> dict:
    config = json.loads((folder / "config.json").read_text())
    # multimodal configs keep the language model's shape in text_config
    return {**config, **config.get("text_config", {})} if isinstance(config.get("text_config"), dict) else config


def _chat_template(folder: Path) -> bool:
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file():
        return True
    try:
        return bool(json.loads((folder / "tokenizer_config.json").read_text()).get("chat_template"))
    except (OSError, ValueError):
        return False


def has_chat_template(folder: Path) -> bool:
    """Whether a model folder's tokenizer carries a chat template."""
    return _chat_template(folder)


def from_folder(name: str, folder: Path) -> ModelInfo:
    c = _config(folder)
    heads = c.get("num_attention_heads", 1)
    params, dtype = safetensors_params(folder)
    how = "counted from the safetensors headers"
    arch = {
        "hidden_size": c.get("hidden_size", 0),
        "layers": c.get("num_hidden_layers", 0),
        "heads": heads,
        "kv_heads": c.get("num_key_value_heads") or heads,
        "intermediate_size": c.get("intermediate_size", 0),
        "vocab_size": c.get("vocab_size", 0),
        "tie_embeddings": bool(c.get("tie_word_embeddings", False)),
    }
    if not params:
        params, how = params_from_arch(arch), "computed from config.json (no safetensors weights)"
    disk = on_disk(folder)
    return ModelInfo(
        name=name,
        path=folder,
        on_disk=True,
        architecture=(c.get("architectures") or [c.get("model_type", "?")])[0],
        params=params,
        params_how=how,
        dtype=dtype or c.get("dtype") or c.get("torch_dtype"),
        context_length=c.get("max_position_embeddings"),
        chat_template=_chat_template(folder),
        size_bytes=folder_size(folder),
        complete=disk.complete,
        **arch,
    )


def from_option(name: str, model: Model) -> ModelInfo:
    a = model.arch
    if a is None:
        raise ModelError(
            f"{name} is not pulled, and its option declares no arch: nothing to read its shape from.",
            hint=f"trainctl model pull {name}",
        )
    arch = {
        "hidden_size": a.hidden_size,
        "layers": a.layers,
        "heads": a.heads,
        "kv_heads": a.kv_heads or a.heads,
        "intermediate_size": a.intermediate_size,
        "vocab_size": a.vocab_size,
        "tie_embeddings": bool(a.tie_embeddings),
    }
    params = model.params
    how = "from the model option (conf/model/)" if params else "computed from the model option's arch"
    return ModelInfo(
        name=name,
        path=Path(model.path).expanduser(),
        on_disk=False,
        architecture=a.type,
        params=int(params or params_from_arch(arch)),
        params_how=how,
        dtype=None,
        context_length=model.context_length,
        chat_template=None,
        **arch,
    )


def model_info(name: str, search: SearchPath | None = None) -> ModelInfo:
    """A model option (read from its folder when pulled, else from the option) or a model folder."""
    ref = resolve_ref(name, search=search)
    if (ref.path / "config.json").is_file():
        return from_folder(ref.label, ref.path)
    if ref.option:
        return from_option(ref.name, ref.option)
    raise ModelError(f"{ref.label} is not on disk ({ref.path}).", hint=f"trainctl model pull {name}")
