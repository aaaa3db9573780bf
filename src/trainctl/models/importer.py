"""`trainctl model import`: a model from a GGUF file (llama.cpp's and Ollama's format) or a Hugging Face folder, into
the folder a model name points at, as safetensors a trainer reads.

A GGUF file is read through transformers' GGUF support (the `gguf` package): its quantized tensors (Q4_1, Q8_0, ...)
are dequantized to float32, and the tokenizer and chat template come from its metadata. A folder is loaded and saved
again, so that its weights are safetensors whatever it held. Everything is written into a staging folder beside the
target (`.NAME.importing-PID`), then checked: the saved model loads, gives the source's logits on a probe, tokenizes
a probe as the source does, and generates an answer to a question greedily; only then is the folder renamed into
place, so an import that fails or is interrupted leaves nothing half-written where training would read it.

A name of one's own (`--name smol`) makes the model a model option like a shipped one (`model=smol`, `eval smol`,
`model serve smol`, the server's launch form): the import writes its option file into trainctl's home
(<home>/conf/model/smol.yaml: its architecture and size, for the plan's memory estimate and learning-rate check, and
the source file and checksum it came from), once the folder is in place. The name of an existing option fills that
option's folder, as `model pull` does; one whose architecture differs from the source's is refused, before anything
is read further or written (model=NAME would silently train another model).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainctl.models.catalog import ModelError, models_dir, read_manifest, write_manifest

if TYPE_CHECKING:
    from trainctl.config.search import SearchPath

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# words Hydra reads as a value rather than an option's name (model=null removes the model), and numbers
NOT_NAMES = re.compile(r"^(null|none|true|false|nan|[+-]?inf|[0-9._]+(e[+-]?[0-9]+)?)$", re.IGNORECASE)
# the architecture fields an imported model must share with the option whose name it takes
SHAPE = ("hidden_size", "layers", "heads", "kv_heads", "vocab_size")
# what the check asks the imported model, greedily, in its own chat template
QUESTION = "What is 2 + 3?"
ANSWER_TOKENS = 24
# a probe for the tokenizer: digits (split one by one by some pre-tokenizers), spaces, newlines, non-ASCII, markup
PROBE = "What is 26 + 38?  Let's think step by step.\n#### 64 (héllo, wörld) <tag> ... 1234567"
# the saved model and the source are the same numbers in the same dtype: their logits agree to rounding
LOGITS_TOLERANCE = 1e-4


@dataclass
class Imported:
    path: Path
    name: str
    source: Path
    kind: str  # gguf or folder
    architecture: str
    params: int
    dtype: str
    quantization: str | None  # the GGUF's tensor types, e.g. "Q4_1 (210), F32 (61), Q8_0 (1)"
    answer: str  # its greedy answer to QUESTION
    seconds: float
    option: bool  # the name is a model option (model=NAME reads the folder)
    notes: list[str] = field(default_factory=list)
    option_file: Path | None = None  # the option file this import wrote (a name of one's own)
    sha256: str | None = None  # the source's (a GGUF file's; a folder's files, in order)


def _say(status: Callable[[str], None] | None, text: str) -> None:
    if status:
        status(text)


@dataclass
class Target:
    path: Path  # the folder the import fills
    option: Any = None  # the model option NAME already is (its Model), if any
    option_file: Path | None = None  # its file
    writes_option: bool = False  # the import writes NAME's option file into trainctl's home


def target_for(name: str, out: Path | None, search: SearchPath | None) -> Target:
    """Where an import named NAME goes: an existing option's path (a shipped or user option: its folder filled, as
    `model pull` fills it; one an earlier import wrote: replaced), else <paths.models>/NAME with an option of its
    own; --out puts the folder elsewhere."""
    from trainctl.config.load import load_option
    from trainctl.config.search import SearchPath
    from trainctl.paths import home_conf_dir

    search = search or SearchPath.default()
    option = load_option("model", name, search)
    file = search.options("model").get(name)
    ours = file is not None and home_conf_dir().resolve() in file.resolve().parents
    if option is None:
        path = Path(out).expanduser().resolve() if out is not None else (models_dir(search) / name).resolve()
        return Target(path, writes_option=True)
    if out is not None:  # somewhere else: the option keeps its own folder (and an earlier import's is replaced)
        return Target(Path(out).expanduser().resolve(), option, file, writes_option=ours)
    return Target(Path(option.path).expanduser().resolve(), option, file, writes_option=ours)


def check_name(name: str, source: Path) -> None:
    """A name that is a folder's name and a model option's (model=NAME), or ModelError."""
    if not NAME.match(name) or NOT_NAMES.match(name):
        raise ModelError(
            f"--name {name!r}: a model name is letters, digits, '.', '_' and '-', starting with a letter or digit, and "
            "not a word the command line reads as a value (null, true, false, a number): it names a folder and "
            "model=NAME.",
            hint=f"--name {default_name(source)}",
        )


def _source_shape(kind: str, source: Path, meta: dict[str, Any]) -> dict[str, Any]:
    """The source's architecture (SHAPE's fields, and its type where known), read before any weight is."""
    if kind == "gguf":
        return {k: meta.get(k) for k in (*SHAPE, "type")}
    try:
        config = json.loads((source / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    config = config.get("text_config") or config
    return {
        "type": (config.get("architectures") or [None])[0],
        "hidden_size": config.get("hidden_size"),
        "layers": config.get("num_hidden_layers"),
        "heads": config.get("num_attention_heads"),
        "kv_heads": config.get("num_key_value_heads") or config.get("num_attention_heads"),
        "vocab_size": config.get("vocab_size"),
    }


def _words(shape: dict[str, Any]) -> str:
    kind = f"{shape['type']}: " if shape.get("type") else ""
    return (
        f"{kind}hidden {shape.get('hidden_size')}, {shape.get('layers')} layers, {shape.get('heads')} heads "
        f"({shape.get('kv_heads')} KV), {shape.get('vocab_size')} tokens"
    )


def check_shadowing(name: str, target: Target, shape: dict[str, Any], source: Path, search) -> None:
    """Refuse to fill an option's folder (one trainctl did not write) with a model of another architecture: every
    model=NAME would then train, evaluate and serve it in the option's place."""
    option = target.option
    if option is None or target.writes_option or option.arch is None:  # an option that declares no shape: no clash
        return
    want = {k: getattr(option.arch, k) for k in SHAPE}
    if any(shape.get(k) is not None and want[k] != shape[k] for k in SHAPE):
        label = search.label(target.option_file) if target.option_file else name
        other = default_name(source) if default_name(source) != name else f"{name}-imported"
        raise ModelError(
            f"--name {name}: model={name} is the model option {label} ({_words({**want, 'type': option.arch.type})}), "
            f"and {source.name} holds another model ({_words(shape)}): imported there, model={name} would train, "
            "evaluate and serve it instead. Nothing was written.",
            hint=f"a name of its own: --name {other}",
        )


def default_name(source: Path) -> str:
    """SmolLM2-135M-Instruct.Q4_1.gguf -> smollm2-135m-instruct (the quantization suffix dropped)."""
    stem = source.name if source.is_dir() else source.stem
    stem = re.sub(r"[.-](I?Q[0-9][A-Za-z0-9_]*|F16|F32|BF16)$", "", stem, flags=re.IGNORECASE)
    return re.sub(r"[^a-z0-9._-]+", "-", stem.lower()).strip("-.") or "imported"


def _gguf(path: Path):
    """The gguf package, which reading `path` needs."""
    try:
        import gguf
    except ImportError:
        raise ModelError(
            f"reading {path.name} needs the gguf package, which is not installed.", hint="pip install gguf"
        ) from None
    return gguf


def _gguf_metadata(path: Path) -> dict[str, Any]:
    """The GGUF header's architecture, tensor types and special token ids (memory-mapped: nothing is loaded)."""
    try:
        reader = _gguf(path).GGUFReader(path)
    except Exception as e:
        raise ModelError(f"{path} is not a GGUF file trainctl can read: {str(e).splitlines()[0][:200]}") from None

    def value(key: str) -> Any:
        f = reader.fields.get(key)
        return None if f is None else f.contents()

    counts: dict[str, int] = {}
    for t in reader.tensors:
        counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
    arch = value("general.architecture")
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    return {
        "architecture": arch,
        # the shape an option's arch declares (llama.cpp's names), to compare before anything is loaded
        "hidden_size": value(f"{arch}.embedding_length"),
        "layers": value(f"{arch}.block_count"),
        "heads": value(f"{arch}.attention.head_count"),
        "kv_heads": value(f"{arch}.attention.head_count_kv") or value(f"{arch}.attention.head_count"),
        "vocab_size": value(f"{arch}.vocab_size") or (len(tokens.data) if tokens is not None else None),
        "name": value("general.name"),
        "types": dict(sorted(counts.items(), key=lambda kv: -kv[1])),
        "tokens": {
            role: value(f"tokenizer.ggml.{key}_token_id")
            for role, key in (("bos", "bos"), ("eos", "eos"), ("pad", "padding"), ("unk", "unknown"))
        },
        "context_length": value(f"{value('general.architecture')}.context_length"),
    }


def _check_gguf_architecture(path: Path, architecture: str | None) -> None:
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    if architecture not in GGUF_SUPPORTED_ARCHITECTURES:
        raise ModelError(
            f"{path.name} holds a {architecture!r} model, which transformers cannot load from GGUF.",
            details=[f"transformers reads these GGUF architectures: {', '.join(sorted(GGUF_SUPPORTED_ARCHITECTURES))}"],
            hint="import the model's Hugging Face folder instead: trainctl model import PATH/TO/FOLDER --name NAME",
        )


@contextlib.contextmanager
def _gguf_read_once(source: Path):
    """transformers reads a GGUF file whole four times to load one model (the tokenizer, the config twice, the weights:
    each a gguf.GGUFReader that parses every field, the vocabulary's 49k tokens for SmolLM2, ~3 s apiece on 2 cores) and
    builds llama.cpp's tensor-name map once per module it maps (397 times for SmolLM2, 4.5 s). transformers only reads
    both, so within this block each file gets one reader and each (architecture, blocks) one map, shared: the import's
    load 31 s -> 12 s (profiled). transformers imports both names from gguf when it needs them: their module
    attributes are what is swapped, and put back. The header's own checks (_gguf_metadata) share the reader too; the
    block imports gguf alone, so that those checks still answer before transformers is imported."""
    import functools

    gguf = _gguf(source)
    readers: dict[tuple[str, str], Any] = {}
    reader_type, name_map = gguf.GGUFReader, gguf.get_tensor_name_map

    def read_once(path, mode="r"):
        key = (os.path.realpath(path), mode)
        if key not in readers:
            readers[key] = reader_type(path, mode)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = read_once, functools.lru_cache(maxsize=None)(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader_type, name_map


@contextlib.contextmanager
def _gguf_parsed_once():
    """The tokenizer and the config (twice) turn every field of the GGUF file into Python values (transformers'
    load_gguf_checkpoint without tensors: the 49k tokens and 49k merges one numpy scalar at a time): within this block
    that is done once a file, and each caller gets its own copy. The three modules that call it import it by name at
    their import: their attributes are swapped, and put back. With the header's read shared (_gguf_read_once),
    SmolLM2's whole import 29.4 -> 22.0 s (two runs each, the same files written)."""
    import copy

    import transformers.configuration_utils
    import transformers.models.auto.tokenization_auto
    import transformers.tokenization_utils_tokenizers
    from transformers import modeling_gguf_pytorch_utils

    parsed: dict[str, dict] = {}
    load = modeling_gguf_pytorch_utils.load_gguf_checkpoint
    callers = [
        (module, module.load_gguf_checkpoint)
        for module in (
            transformers.configuration_utils,
            transformers.models.auto.tokenization_auto,
            transformers.tokenization_utils_tokenizers,
        )
    ]

    def parse_once(path, return_tensors=False, **kwargs):
        if return_tensors or kwargs:  # the weights: read once, by the model's load
            return load(path, return_tensors=return_tensors, **kwargs)
        key = os.path.realpath(path)
        if key not in parsed:
            parsed[key] = load(path)
        return copy.deepcopy(parsed[key])

    for module, _ in callers:
        module.load_gguf_checkpoint = parse_once
    try:
        yield
    finally:
        for module, own in callers:
            module.load_gguf_checkpoint = own


def _load_gguf(path: Path, meta: dict[str, Any]):
    """The model (dequantized to float32) and its tokenizer, with the special tokens the GGUF header names (inside
    _gguf_read_once: the file is read once)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _gguf_parsed_once():
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name)
    # transformers 5.10 reads bos and eos both as the bos token (SmolLM2's eos became <|im_start|>, so generation
    # never stopped at <|im_end|>): take each special token from its id in the header
    for role, token_id in meta["tokens"].items():
        if token_id is not None and 0 <= int(token_id) < len(tokenizer):
            setattr(tokenizer, f"{role}_token", tokenizer.convert_ids_to_tokens(int(token_id)))
    if meta.get("context_length"):
        tokenizer.model_max_length = int(meta["context_length"])
    return model, tokenizer


def _load_folder(path: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype="auto")
    except Exception as e:
        raise ModelError(
            f"{path} does not load as a causal language model: {str(e).splitlines()[0][:300]}",
            hint="a folder with config.json, weights (safetensors or .bin) and a tokenizer",
        ) from None
    return model, tokenizer


def _sha256(path: Path) -> str:
    """A file's sha256; a folder's: of its files' relative names and contents, in name order."""
    h = hashlib.sha256()
    files = sorted(f for f in path.rglob("*") if f.is_file()) if path.is_dir() else [path]
    for f in files:
        if path.is_dir():
            h.update(str(f.relative_to(path)).encode() + b"\0")
        with f.open("rb") as fh:
            for block in iter(lambda fh=fh: fh.read(1 << 22), b""):
                h.update(block)
    return h.hexdigest()


def _answer(model, tokenizer) -> tuple[str, int, Any]:
    """The model's greedy answer to QUESTION in its chat template (or plain, without one), how many tokens it
    generated, and the prompt's ids."""
    import torch

    if tokenizer.chat_template:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": QUESTION}], add_generation_prompt=True, tokenize=False
        )
    else:
        text = QUESTION
    ids = tokenizer(text, return_tensors="pt", add_special_tokens=not tokenizer.chat_template)
    with torch.no_grad():
        out = model.generate(
            **ids,
            max_new_tokens=ANSWER_TOKENS,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
        )
    new = out[0, ids.input_ids.shape[1] :]
    return tokenizer.decode(new, skip_special_tokens=True).strip(), len(new), ids.input_ids


def verify(folder: Path, source_model, source_tokenizer) -> tuple[str, list[str]]:
    """Load what was written as a trainer will (AutoModelForCausalLM, AutoTokenizer): (its greedy answer, problems).

    The saved weights must give the source's logits on a probe, the saved tokenizer the source's ids, and generation
    must run (what a random model answers may be nothing but its end-of-sequence token)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    problems = []
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype="auto")
    except Exception as e:
        return "", [f"the written folder does not load: {str(e).splitlines()[0][:300]}"]
    if tokenizer(PROBE).input_ids != source_tokenizer(PROBE).input_ids:
        problems.append("the written tokenizer splits text differently from the source's")
    if tokenizer.eos_token_id is None:
        problems.append("the tokenizer names no end-of-sequence token: generation would never stop")
    answer, generated, prompt = _answer(model, tokenizer)
    with torch.no_grad():
        got = model(prompt).logits.float()
        want = source_model(prompt).logits.float()
    gap = (got - want).abs().max().item()
    if not gap <= LOGITS_TOLERANCE:
        problems.append(f"the written weights' logits differ from the source's by up to {gap:.3g}")
    if not generated:
        problems.append(f"it generates no token for {QUESTION!r}")
    return answer, problems


def _check_space(folder: Path, need: int) -> None:
    from trainctl.models.pull import human

    probe = folder
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if need > free:
        raise ModelError(
            f"not enough disk space at {probe}: the imported model needs about {human(need)}, {human(free)} is free.",
            hint="free some space, or import somewhere else: --out /path/with/room (and point model.path there)",
        )


def import_model(
    source: Path,
    name: str | None = None,
    out: Path | None = None,
    force: bool = False,
    search: SearchPath | None = None,
    status: Callable[[str], None] | None = None,
) -> Imported:
    """Import a GGUF file or a Hugging Face folder as NAME; raises ModelError before writing anything when it cannot."""
    started = time.monotonic()
    source = Path(source).expanduser().resolve()
    if source.is_dir():
        kind = "folder"
        if not (source / "config.json").is_file():
            raise ModelError(
                f"{source} has no config.json: it is not a Hugging Face model folder.",
                hint="trainctl model import takes a .gguf file, or a folder of config.json, weights and a tokenizer",
            )
    elif source.is_file():
        kind = "gguf"
        with source.open("rb") as fh:
            if fh.read(4) != b"GGUF":
                raise ModelError(
                    f"{source} is not a GGUF file (it does not start with GGUF's magic bytes).",
                    hint="trainctl model import takes a .gguf file or a Hugging Face model folder",
                )
    else:
        raise ModelError(f"{source} does not exist.", hint="trainctl model import FILE.gguf --name NAME")
    name = name or default_name(source)
    check_name(name, source)
    where = target_for(name, out, search)
    target = where.path
    if target == source or source in target.parents:
        raise ModelError(f"{source} would be imported into itself ({target}).", hint="--out SOMEWHERE_ELSE")
    if target.exists() and not force:
        what = "a model trainctl made" if read_manifest(target) else "a folder"
        raise ModelError(
            f"{target} already exists ({what}): not replacing it.",
            hint=f"trainctl model import {source} --name {name} --force   (replaces it once the import has succeeded)",
        )

    meta: dict[str, Any] = {}
    # a GGUF file is read once, from its header's checks to its load
    with _gguf_read_once(source) if kind == "gguf" else contextlib.nullcontext():
        if kind == "gguf":
            meta = _gguf_metadata(source)
        check_shadowing(name, where, _source_shape(kind, source, meta), source, search)
        if kind == "gguf":
            _check_gguf_architecture(source, meta["architecture"])
            # float32 weights: about 4 bytes a parameter against the file's ~0.6 (4-bit) to 2 (16-bit)
            need = source.stat().st_size * 8
        else:
            need = sum(f.stat().st_size for f in source.rglob("*") if f.is_file()) * 2
        _check_space(target.parent, need)

        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # the dequantization's bar per tensor, the shards' bar
        _say(status, f"reading {source}" + (f" ({_types(meta['types'])})" if meta else ""))
        model, tokenizer = _load_gguf(source, meta) if kind == "gguf" else _load_folder(source)
    # transformers 5 warns on every load of a BPE tokenizer saved with it on, and never applies it to BPE
    tokenizer.clean_up_tokenization_spaces = False
    for loader_only in ("local_files_only", "is_local"):  # how this process loaded it, not what it is
        tokenizer.init_kwargs.pop(loader_only, None)
    model.eval()
    architecture = (model.config.architectures or [type(model).__name__])[0]
    params = sum(p.numel() for p in model.parameters())
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")

    staging = target.parent / f".{target.name}.importing-{os.getpid()}"
    old = target.parent / f".{target.name}.replaced-{os.getpid()}"
    staging.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(staging, ignore_errors=True)
    try:
        _say(status, f"writing {architecture} ({params / 1e6:.1f}M parameters, {dtype}) as safetensors")
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        mode = 0o666 & ~_umask()
        for f in staging.iterdir():
            f.chmod(mode)  # safetensors writes its file 0600: readable by its owner only
        _say(status, "checking that it loads and answers as the source does")
        answer, problems = verify(staging, model, tokenizer)
        if problems:
            raise ModelError(f"the import of {source.name} did not check out; nothing was kept:", details=problems)
        notes = []
        if not tokenizer.chat_template:
            notes.append(
                "the tokenizer has no chat template: chat-format data (sft, dpo, rl prompts) cannot be rendered"
            )
        files = {str(f.relative_to(staging)): f.stat().st_size for f in sorted(staging.rglob("*")) if f.is_file()}
        sha256 = _sha256(source)
        write_manifest(
            staging,
            {
                "name": name,
                "imported_from": str(source),
                "source_kind": kind,
                "source_sha256": sha256,
                "gguf_tensor_types": meta.get("types"),
                "architecture": architecture,
                "params": params,
                "dtype": dtype,
                "check": {"question": QUESTION, "answer": answer},
                "files": files,
                "complete": True,
                "seconds": round(time.monotonic() - started, 1),
            },
        )
        if target.exists():
            os.rename(target, old)
        try:
            os.rename(staging, target)
        except OSError:
            if old.exists():
                os.rename(old, target)  # the model that was there stays
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    option_file = (
        write_option(name, target, model.config, architecture, params, source, sha256, search)
        if (where.writes_option)
        else None
    )
    return Imported(
        target,
        name,
        source,
        kind,
        architecture,
        params,
        dtype,
        _types(meta["types"]) if meta else None,
        answer,
        time.monotonic() - started,
        (where.option is not None and out is None) or option_file is not None,
        notes,
        option_file,
        sha256,
    )


def write_option(name: str, folder: Path, config, architecture: str, params: int, source: Path, sha256: str,
                 search) -> Path:  # fmt: skip
    """NAME's model option, in trainctl's home: the folder, its architecture and size (what the plan's memory
    estimate and learning-rate check read), and where it came from."""
    import yaml

    from trainctl.paths import atomic_write_text, home_conf_dir

    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = int(config.num_attention_heads)
    arch = {
        "type": architecture,
        "hidden_size": int(config.hidden_size),
        "layers": int(config.num_hidden_layers),
        "heads": heads,
        "kv_heads": int(getattr(config, "num_key_value_heads", None) or heads),
        "intermediate_size": int(config.intermediate_size),
        "vocab_size": int(config.vocab_size),
        "tie_embeddings": bool(getattr(config, "tie_word_embeddings", False)),
    }
    # the longest sequence the architecture's positions allow (a config without it: the tokenizer's usual 2048)
    context = int(getattr(config, "max_position_embeddings", None) or 2048)
    body = {"name": name, "params": float(params), "context_length": context}
    if folder != (models_dir(search) / name).resolve():
        body["path"] = str(folder)  # elsewhere than where ${paths.models}/${model.name} points
    header = (
        f"# {name}: {architecture}, {params / 1e6:.1f}M parameters, imported by `trainctl model import`\n"
        f"# from {source}\n# sha256 {sha256} (its folder's trainctl-model.json records the same)\n"
        f"# `trainctl model rm {name}` removes the model and this file\n"
    )
    text = header + "defaults:\n  - _base\n  - _self_\n\n" + yaml.safe_dump({**body, "arch": arch}, sort_keys=False)
    file = home_conf_dir() / "model" / f"{name}.yaml"
    atomic_write_text(file, text)
    return file


def _types(types: dict[str, int]) -> str:
    """{"Q4_1": 210, "F32": 61} -> "210 Q4_1 and 61 F32 tensors"."""
    parts = [f"{n} {t}" for t, n in types.items()]
    return (", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]) + " tensors"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
