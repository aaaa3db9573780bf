"""Writing a Hugging Face folder (safetensors) as one GGUF file, with the `gguf` package (llama.cpp's gguf-py).

gguf-py has the file writer, the tensor-name table and the quantizers; what llama.cpp's converter adds on top, and
this module does for the architectures it exports: the architecture's hyperparameters under llama.cpp's keys, Llama's
Q/K row permutation (llama.cpp's Llama rotates pairs of neighbouring dimensions, transformers' pairs half a head
apart; Qwen2 and Qwen3 use the latter in llama.cpp too), which tensors stay float32 (norms and biases, as the converter
keeps them), and the vocabulary (trainctl.ckpt.gguf_vocab).

Tensors are streamed: every tensor's name, type and size go into the header first, then each tensor is read, cast and
written on its own, so memory holds one tensor at a time, never the model.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from trainctl.ckpt.layout import CheckpointError

# transformers' class -> llama.cpp's architecture
ARCHITECTURES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}
DTYPES = ("f32", "f16", "bf16", "q8_0")


@dataclass
class Arch:
    """What the export needs from config.json, checked before anything is written."""

    hf: str  # LlamaForCausalLM
    name: str  # llama
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    explicit_head_dim: bool  # config.json names head_dim (Qwen3): written as llama.cpp's key/value length
    context: int
    rope_theta: float
    rms_eps: float
    tied: bool


@dataclass
class Written:
    path: Path
    tensors: int
    bytes: int
    types: dict[str, int] = field(default_factory=dict)  # GGML type -> tensors


def _rope(config: dict) -> tuple[float, str | None]:
    """(rope theta, a scaling type other than none) from transformers 5's rope_parameters or 4's keys."""
    params = config.get("rope_parameters") or {}
    theta = params.get("rope_theta", config.get("rope_theta", 10000.0))
    scaling = params.get("rope_type") or (config.get("rope_scaling") or {}).get("rope_type")
    scaling = scaling or (config.get("rope_scaling") or {}).get("type")
    return float(theta), (None if scaling in (None, "default") else str(scaling))


def read_arch(config: dict, where: str) -> Arch:
    """config.json's architecture as llama.cpp needs it; CheckpointError naming what cannot be exported."""
    hf = (config.get("architectures") or ["?"])[0]
    if hf not in ARCHITECTURES:
        raise CheckpointError(
            f"{where}: {hf} cannot be exported to GGUF by trainctl; nothing was written",
            details=[f"it exports: {', '.join(ARCHITECTURES)}"],
            hint="a reward model (a classification head) or another family: llama.cpp's own converter, "
            "convert_hf_to_gguf.py, covers more architectures",
        )
    theta, scaling = _rope(config)
    if scaling:
        raise CheckpointError(
            f"{where}: RoPE scaling {scaling!r} is not exported by trainctl yet (only unscaled RoPE); "
            "nothing was written",
            hint="llama.cpp's own converter, convert_hf_to_gguf.py, writes the scaling keys and factors",
        )
    heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])
    head_dim = config.get("head_dim") or hidden // heads
    return Arch(
        hf=hf,
        name=ARCHITECTURES[hf],
        layers=int(config["num_hidden_layers"]),
        hidden=hidden,
        ffn=int(config["intermediate_size"]),
        heads=heads,
        kv_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=int(head_dim),
        explicit_head_dim=config.get("head_dim") is not None and int(config["head_dim"]) != hidden // heads,
        context=int(config.get("max_position_embeddings") or 2048),
        rope_theta=theta,
        rms_eps=float(config.get("rms_norm_eps") or 1e-6),
        tied=bool(config.get("tie_word_embeddings", False)),
    )


def _permute(w, n_head: int):
    """Llama's Q/K rows, from transformers' rotary layout (halves) to llama.cpp's (interleaved pairs)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _weight_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [folder / n for n in names]
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise CheckpointError(
            f"{folder} has no safetensors weights",
            hint=f"trainctl model import {folder} --name NAME   (saves its weights as safetensors), then export that",
        )
    return files


def _ggml_type(name: str, ndim: int, dtype: str, cols: int):
    """The GGML type a tensor is written as: 1-D tensors (norms, biases) stay F32; Q8_0 needs rows of whole
    32-value blocks, else the tensor falls back to F16 as the converter's does."""
    import gguf

    T = gguf.GGMLQuantizationType
    if ndim < 2 or dtype == "f32":
        return T.F32
    if dtype == "q8_0":
        return T.Q8_0 if cols % 32 == 0 else T.F16
    return {"f16": T.F16, "bf16": T.BF16}[dtype]


def _file_type(dtype: str):
    import gguf

    F = gguf.LlamaFileType
    return {"f32": F.ALL_F32, "f16": F.MOSTLY_F16, "bf16": F.MOSTLY_BF16, "q8_0": F.MOSTLY_Q8_0}[dtype]


def _encode(array, qtype):
    """A float32 array in its GGML type, as the bytes (or float16/float32 array) gguf-py writes."""
    import gguf
    import numpy as np

    T = gguf.GGMLQuantizationType
    if qtype == T.F32:
        return np.ascontiguousarray(array, dtype=np.float32)
    if qtype == T.F16:
        return np.ascontiguousarray(array, dtype=np.float16)
    return gguf.quants.quantize(np.ascontiguousarray(array, dtype=np.float32), qtype)


def _plan_tensors(folder: Path, arch: Arch, dtype: str):
    """(GGUF name, file, HF name, shape, GGML type) of every tensor to write, in the files' order."""
    import gguf
    from safetensors import safe_open

    names = gguf.get_tensor_name_map(getattr(gguf.MODEL_ARCH, arch.name.upper()), arch.layers)
    out, unknown, seen = [], [], set()
    for f in _weight_files(folder):
        with safe_open(str(f), framework="pt") as h:
            for n in h.keys():  # noqa: SIM118
                if n.endswith("rotary_emb.inv_freq"):
                    continue  # recomputed from rope theta
                if n == "lm_head.weight" and arch.tied:
                    continue  # tied: llama.cpp reads the token embedding as the output layer
                new = names.get_name(n, try_suffixes=(".weight", ".bias"))
                if new is None:
                    unknown.append(n)
                    continue
                shape = tuple(h.get_slice(n).get_shape())
                out.append((new, f, n, shape, _ggml_type(new, len(shape), dtype, shape[-1])))
                seen.add(new)
    if unknown:
        raise CheckpointError(
            f"{folder}: {len(unknown)} tensors have no place in llama.cpp's {arch.name} ({', '.join(unknown[:4])})",
            hint="the weights do not match config.json's architecture",
        )
    if "token_embd.weight" not in seen:
        raise CheckpointError(f"{folder}: no token embedding (model.embed_tokens.weight) in the weights")
    if not arch.tied and "output.weight" not in seen:
        raise CheckpointError(
            f"{folder}: no output layer (lm_head.weight), and config.json does not tie it to the embedding"
        )
    return out


def write_gguf(
    folder: Path,
    out: Path,
    dtype: str,
    arch: Arch,
    vocab,
    name: str,
    progress: Callable[[int], None] | None = None,
) -> Written:
    """Write the model in `folder` to `out` (which the caller removes on failure)."""
    import gguf
    import numpy as np
    import torch
    from safetensors import safe_open

    from trainctl.ckpt import gguf_vocab

    tensors = _plan_tensors(folder, arch, dtype)
    embd = next(shape for new, _, _, shape, _ in tensors if new == "token_embd.weight")
    if len(vocab.tokens) != embd[0]:
        raise CheckpointError(f"{folder}: {len(vocab.tokens)} tokens for an embedding of {embd[0]} rows")
    writer = gguf.GGUFWriter(out, arch.name)
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(name)
    writer.add_context_length(arch.context)
    writer.add_embedding_length(arch.hidden)
    writer.add_block_count(arch.layers)
    writer.add_feed_forward_length(arch.ffn)
    writer.add_head_count(arch.heads)
    writer.add_head_count_kv(arch.kv_heads)
    writer.add_rope_freq_base(arch.rope_theta)
    writer.add_layer_norm_rms_eps(arch.rms_eps)
    if arch.explicit_head_dim:
        writer.add_key_length(arch.head_dim)
        writer.add_value_length(arch.head_dim)
    if arch.name == "llama":
        writer.add_vocab_size(embd[0])
        writer.add_rope_dimension_count(arch.head_dim)
    writer.add_file_type(_file_type(dtype))
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    gguf_vocab.add_to_writer(writer, folder, vocab)
    counts: dict[str, int] = {}
    total = 0
    for new, _, _, shape, qtype in tensors:
        byte_shape = gguf.quant_shape_to_byte_shape(shape, qtype) if qtype.name in ("BF16", "Q8_0") else shape
        itemsize = {"F32": 4, "F16": 2}.get(qtype.name, 1)
        nbytes = int(np.prod(byte_shape)) * itemsize
        np_dtype = {"F32": np.float32, "F16": np.float16}.get(qtype.name, np.uint8)
        writer.add_tensor_info(new, byte_shape, np.dtype(np_dtype), nbytes, raw_dtype=qtype)
        counts[qtype.name] = counts.get(qtype.name, 0) + 1
        total += nbytes
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        handles: dict[Path, object] = {}
        for new, f, n, _, qtype in tensors:
            if f not in handles:
                handles.clear()  # one file open at a time
                handles[f] = safe_open(str(f), framework="pt")
            t = handles[f].get_tensor(n).to(torch.float32)
            if arch.name == "llama" and new.endswith(("attn_q.weight", "attn_q.bias")):
                t = _permute(t, arch.heads)
            elif arch.name == "llama" and new.endswith(("attn_k.weight", "attn_k.bias")):
                t = _permute(t, arch.kv_heads)
            data = _encode(t.numpy(), qtype)
            writer.write_tensor_data(data)
            if progress:
                progress(data.nbytes)
            del t, data
    finally:
        writer.close()
    return Written(out, len(tensors), out.stat().st_size, counts)
