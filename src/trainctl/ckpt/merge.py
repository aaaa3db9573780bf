"""`trainctl ckpt merge`: any checkpoint -> a plain Hugging Face safetensors model, streamed and verified.

Memory stays near one row block: the safetensors header is computed from the full shapes before any data is read,
then each tensor is written as its row blocks in order (FSDP ranks' `Shard(0)` pieces, or a base model's rows with
the LoRA delta added), cast a block at a time. The output is then read back and compared bit for bit with what
the checkpoint holds, its tensor names and shapes are checked against the architecture transformers builds from
its config.json, and only then is the temporary folder renamed into place. A disk without room for the model is found
before a byte is written; one that fills up during the merge (someone else writing there) is a clear error, and the
temporary folder goes.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from trainctl.ckpt.layout import Checkpoint, CheckpointError, Part
from trainctl.ckpt.tensors import (
    ST_NAMES,
    FoldedSource,
    FsdpSource,
    Lora,
    SafetensorsSource,
    Source,
    lora_from_fsdp,
    release,
    safetensors_header,
    weight_files,
)

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_CHUNK = 32 << 20  # bytes cast and written at a time
# files of a model folder that are not weights and not config.json: tokenizer, chat template, generation config
_WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".index.json")
# what a write that found no room fails with: the disk full, a quota reached
_FULL = (errno.ENOSPC, errno.EDQUOT)
# what a model folder takes beyond its files' bytes: a file's last block, the headers, the config (bytes)
_PER_FILE_SLACK = 4096
_NOT_COPIED = {
    "config.json",
    "fsdp_config.json",
    "lora_train_meta.json",
    "adapter_config.json",
    "trainer_state.json",
    "training_args.bin",
    "scheduler.pt",
    # the base model's card: the merged model gets its own (trainctl.ckpt.card)
    "README.md",
}


@dataclass
class MergePlan:
    checkpoint: Checkpoint
    part: Part
    out: Path
    dtype: str  # resolved: bf16/fp16/fp32
    base: Path | None  # the base model a LoRA is folded into
    lora: tuple[int, float] | None
    tensors: int = 0
    params: int = 0
    bytes: int = 0
    notes: list[str] = field(default_factory=list)


@dataclass
class MergeResult:
    plan: MergePlan
    files: list[Path]
    seconds: float
    changed_by_lora: int = 0  # tensors the LoRA changed


def _dtype_name(dt: torch.dtype) -> str:
    return {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}.get(dt, "fp32")


def _adapter_base_refs(adapter: Path, checkpoint: Checkpoint, base: str | None) -> list[tuple[str, str]]:
    """Where an adapter's base model may be named: --base, else ART's model.json, else adapter_config.json."""
    if base:
        return [("--base", base)]
    refs = []
    for d in (checkpoint.path.parent.parent, checkpoint.path.parent):
        mj = d / "model.json"
        if mj.is_file():
            try:
                ref = json.loads(mj.read_text()).get("base_model")
            except ValueError:
                ref = None
            if ref:
                refs.append((str(mj), ref))
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    if cfg.get("base_model_name_or_path"):
        refs.append((str(adapter / "adapter_config.json"), cfg["base_model_name_or_path"]))
    return refs


def _find_base(candidates: list[tuple[str, str]], adapter: Path, checkpoint: Checkpoint) -> Path:
    """The first candidate that is a model folder, a model option or a pulled repository id."""
    from trainctl.models.catalog import ModelError, resolve_ref

    for _, ref in candidates:
        p = Path(ref).expanduser()
        if (p / "config.json").is_file():
            return p
        if p.is_absolute():  # a folder that is gone: no model option or repository id looks like this
            continue
        try:
            resolved = resolve_ref(ref)
        except ModelError:
            continue
        if (resolved.path / "config.json").is_file():
            return resolved.path
    named = ", ".join(f"{ref!r} (from {src})" for src, ref in candidates)
    first = candidates[0][1] if candidates else "BASE_MODEL"
    raise CheckpointError(
        f"cannot find the base model of the adapter in {adapter}: "
        + (f"tried {named}" if named else "no file there names it"),
        hint=f"trainctl model pull {first}   or pass the folder: trainctl ckpt merge {checkpoint.path} --base DIR",
    )


def _adapter_source(part: Part, checkpoint: Checkpoint, base: str | None) -> tuple[Source, Lora, Path]:
    from safetensors.torch import load_file

    base_dir = _find_base(_adapter_base_refs(part.path, checkpoint, base), part.path, checkpoint)
    files = sorted(part.path.glob("adapter_model*.safetensors"))
    if not files:
        raise CheckpointError(
            f"{part.path} has adapter_config.json but no adapter_model.safetensors", hint=f"ls {part.path}"
        )
    for f in files:
        safetensors_header(f)  # truncation check with a clear message
    tensors = {}
    for f in files:
        tensors.update(load_file(str(f)))
    cfg = json.loads((part.path / "adapter_config.json").read_text())
    lora = Lora.from_tensors(tensors, cfg, part.path / "adapter_config.json")
    base_source = SafetensorsSource(weight_files(base_dir))
    if cfg.get("task_type") == "SEQ_CLS":  # a reward model: written as the classifier it is
        lora.as_classifier(base_source)
    lora.check_against(base_source, part.path)
    return FoldedSource(base_source, lora), lora, base_dir


def _open(part: Part, checkpoint: Checkpoint, base: str | None) -> tuple[Source, Lora | None, Path | None]:
    if part.kind == "fsdp":
        source = FsdpSource(part)
        meta_file = part.path / "lora_train_meta.json"
        meta = json.loads(meta_file.read_text()) if meta_file.is_file() else None
        plain, lora = lora_from_fsdp(source, meta)
        if lora is None:
            return source, None, None
        base_dir = None
        if not any(name in plain.specs for name in lora.factors):
            # saved with checkpoint.save_lora_only: the shards hold the adapter alone; the base is the model the
            # run started from (huggingface/config.json's _name_or_path) or --base
            refs = [("--base", base)] if base else []
            hf = part.hf_dir
            if not base and hf is not None and (hf / "config.json").is_file():
                name = json.loads((hf / "config.json").read_text()).get("_name_or_path")
                if name:
                    refs.append((str(hf / "config.json"), name))
            base_dir = _find_base(refs, part.path, checkpoint)
            plain = SafetensorsSource(weight_files(base_dir))
        lora.check_against(plain, part.path)
        return FoldedSource(plain, lora), lora, base_dir
    if part.kind == "adapter":
        return _adapter_source(part, checkpoint, base)
    return SafetensorsSource(weight_files(part.path)), None, None


def _tied(config: dict, names: set[str]) -> set[str]:
    """lm_head.weight is dropped when the config ties it to the embeddings (as transformers and verl save)."""
    if config.get("tie_word_embeddings") and "lm_head.weight" in names and "model.embed_tokens.weight" in names:
        return {"lm_head.weight"}
    return set()


def classifier_config(config: dict, adapter: Path) -> dict:
    """The base causal LM's config as the one-label sequence classifier a reward model's adapter makes of it (what
    AutoModelForSequenceClassification.from_pretrained(base, num_labels=1) holds, and what trainctl's TRL entry point
    trained: the reward is read at the last token that is not padding, so the pad token is kept)."""
    arch = (config.get("architectures") or ["?"])[0]
    for suffix in ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration"):
        if arch.endswith(suffix):
            arch = arch[: -len(suffix)] + "ForSequenceClassification"
            break
    out = {**config, "architectures": [arch], "id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}}
    if out.get("pad_token_id") is None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(adapter))
        out["pad_token_id"] = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return out


def _config_dir(part: Part, base_dir: Path | None) -> Path:
    d = part.hf_dir
    if d is not None and (d / "config.json").is_file():
        return d
    if base_dir is not None:
        return base_dir
    raise CheckpointError(
        f"{part.path} has no config.json (verl keeps it in huggingface/)",
        hint="copy the run's huggingface/ folder back beside the shards",
    )


def default_out(checkpoint: Checkpoint, part: Part) -> Path:
    suffix = f"-{part.name}" if checkpoint.layout == "verl-ppo" else ""
    return checkpoint.path.parent / f"{checkpoint.path.name}{suffix}-hf"


def plan_merge(
    ckpt: Path,
    out: Path | None = None,
    dtype: str = "auto",
    base: str | None = None,
    part_name: str | None = None,
    force: bool = False,
) -> tuple[MergePlan, Source, Lora | None, dict]:
    """Open everything and check it before a byte is written."""
    from trainctl.ckpt.layout import list_checkpoints

    checkpoint = list_checkpoints(ckpt).latest
    part = checkpoint.part(part_name)
    out = Path(out) if out else default_out(checkpoint, part)
    if dtype not in ("auto", *DTYPES):
        raise CheckpointError(f"--dtype {dtype!r} is not one of auto, bf16, fp16, fp32", hint="--dtype bf16")
    if out.exists() and not force:
        raise CheckpointError(
            f"{out} already exists; trainctl never overwrites a model without --force",
            hint=f"trainctl ckpt merge {checkpoint.path} --out {out} --force   (or choose another --out)",
        )
    source, lora, base_dir = _open(part, checkpoint, base)
    config = json.loads((_config_dir(part, base_dir) / "config.json").read_text())
    if lora is not None and lora.heads:
        config = classifier_config(config, part.path)
    floats = [s.dtype for s in source.specs.values() if s.dtype.is_floating_point]
    trained = max(set(floats), key=floats.count) if floats else torch.float32
    resolved = dtype if dtype != "auto" else _dtype_name(trained)
    plan = MergePlan(checkpoint, part, out, resolved, base_dir, None)
    if lora is not None:
        rank = next(iter(lora.factors.values()))[0].shape[0] if lora.factors else 0
        plan.lora = part.lora or (rank, 0.0)
    skip = _tied(config, set(source.specs))
    for s in source.specs.values():
        if s.name in skip:
            continue
        plan.tensors += 1
        plan.params += s.numel
        plan.bytes += s.numel * (DTYPES[resolved].itemsize if s.dtype.is_floating_point else s.dtype.itemsize)
    if dtype == "auto":
        plan.notes.append(f"dtype auto: keeping the trained dtype {resolved}")
    _check_room(plan, _extras(source_dirs(plan)))
    return plan, source, lora, config


def _free(folder: Path) -> tuple[Path, int]:
    """The nearest existing folder at or above `folder`, and the bytes free on its disk (for this user)."""
    while not folder.exists():
        folder = folder.parent
    return folder, shutil.disk_usage(folder).free


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def _check_room(plan: MergePlan, extras: list[Path]) -> None:
    """The merged model fits on the disk it goes to (with --force, beside the old one: it goes only at the end)."""
    need = plan.bytes + sum(f.stat().st_size for f in extras) + _PER_FILE_SLACK * (plan.tensors + len(extras) + 2)
    where, free = _free(plan.out.parent)
    if need > free:
        raise CheckpointError(
            f"not enough disk space for {plan.out}: the merged model needs about {_human(need)}, and {where} has "
            f"{_human(free)} free. Nothing was written.",
            hint=f"free some space there, or merge onto another disk: trainctl ckpt merge {plan.checkpoint.path} "
            "--out /other/disk/NAME",
        )


def _disk_full(plan: MergePlan, written: int) -> CheckpointError:
    where, free = _free(plan.out.parent)
    return CheckpointError(
        f"the disk filled up while merging into {plan.out} ({_human(written)} of {_human(plan.bytes)} written; "
        f"{where} has {_human(free)} free now). The partial model was removed: nothing was written.",
        hint=f"free some space there, or merge onto another disk: trainctl ckpt merge {plan.checkpoint.path} "
        "--out /other/disk/NAME",
    )


def _out_dtype(spec_dtype: torch.dtype, target: torch.dtype) -> torch.dtype:
    return target if spec_dtype.is_floating_point else spec_dtype


def _write_block(f, block: torch.Tensor, dtype: torch.dtype) -> None:
    if block.dim() == 0:
        f.write(block.to(dtype).reshape(1).view(torch.uint8).numpy().tobytes())
        return
    rows = block.shape[0]
    per_row = max(1, block[0].numel() * max(block.element_size(), dtype.itemsize)) if rows else 1
    step = max(1, _CHUNK // per_row)
    for i in range(0, rows, step):
        piece = block[i : i + step].to(dtype).contiguous()
        f.write(memoryview(piece.reshape(-1).view(torch.uint8).numpy()))


def _layout_files(names: list[str], nbytes: dict[str, int], max_shard: int) -> list[list[str]]:
    groups: list[list[str]] = [[]]
    size = 0
    for n in names:
        if groups[-1] and size + nbytes[n] > max_shard:
            groups.append([])
            size = 0
        groups[-1].append(n)
        size += nbytes[n]
    return groups


def write_safetensors(
    source: Source,
    names: list[str],
    folder: Path,
    dtype: torch.dtype,
    max_shard: int,
    progress: Callable[[int], None] | None = None,
) -> list[Path]:
    specs = source.specs
    nbytes = {n: specs[n].numel * _out_dtype(specs[n].dtype, dtype).itemsize for n in names}
    groups = _layout_files(names, nbytes, max_shard)
    files = []
    weight_map = {}
    for i, group in enumerate(groups, start=1):
        fname = "model.safetensors" if len(groups) == 1 else f"model-{i:05d}-of-{len(groups):05d}.safetensors"
        header: dict = {"__metadata__": {"format": "pt"}}
        offset = 0
        for n in group:
            out_dt = _out_dtype(specs[n].dtype, dtype)
            header[n] = {
                "dtype": ST_NAMES[out_dt],
                "shape": list(specs[n].shape),
                "data_offsets": [offset, offset + nbytes[n]],
            }
            offset += nbytes[n]
            weight_map[n] = fname
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)
        with open(folder / fname, "wb") as f:
            f.write(struct.pack("<Q", len(raw)))
            f.write(raw)
            for n in group:
                out_dt = _out_dtype(specs[n].dtype, dtype)
                for block in source.blocks(n):
                    _write_block(f, block, out_dt)
                    if source.mapped:
                        release(block)
                if progress:
                    progress(nbytes[n])
        files.append(folder / fname)
    if len(groups) > 1:
        index = {"metadata": {"total_size": sum(nbytes.values())}, "weight_map": weight_map}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return files


def verify_written(source: Source, names: list[str], files: list[Path], dtype: torch.dtype) -> None:
    """Every tensor in the output, read back, is bit-identical to the checkpoint's (cast the same way)."""
    from safetensors import safe_open

    where = {}
    handles = [safe_open(str(f), framework="pt") for f in files]
    for f, h in zip(files, handles, strict=True):
        for n in h.keys():  # noqa: SIM118
            where[n] = (f, h)
    missing = [n for n in names if n not in where]
    if missing or len(where) != len(names):
        raise CheckpointError(
            f"verification failed: the written model lacks {missing[:3] or 'nothing'} "
            f"and has {len(where)} tensors instead of {len(names)}"
        )
    for n in names:
        f, h = where[n]
        sl = h.get_slice(n)
        row = 0
        out_dt = _out_dtype(source.specs[n].dtype, dtype)
        for block in source.blocks(n):
            expected = block.to(out_dt)
            got = sl[:] if block.dim() == 0 else sl[row : row + block.shape[0]]
            same = expected.shape == got.shape and torch.equal(
                expected.contiguous().reshape(-1).view(torch.uint8), got.contiguous().reshape(-1).view(torch.uint8)
            )
            if not same:
                raise CheckpointError(f"verification failed: {n} in {f.name} differs from the checkpoint")
            if source.mapped:
                release(block)
            row += block.shape[0] if block.dim() else 0


def check_architecture(folder: Path, names: set[str], shapes: dict[str, tuple]) -> None:
    """transformers builds the model from the written config.json (on the meta device: no memory) and every
    parameter it expects must be in the files with its shape; nothing may be left over."""
    import transformers
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(folder)
    arch = (getattr(config, "architectures", None) or ["AutoModelForCausalLM"])[0]
    cls = getattr(transformers, arch, None) or transformers.AutoModelForCausalLM
    with torch.device("meta"):
        model = cls.from_config(config) if cls is transformers.AutoModelForCausalLM else cls(config)
    expected = {n: tuple(p.shape) for n, p in model.named_parameters()}  # tied weights appear once
    state = {n: tuple(t.shape) for n, t in model.state_dict().items()}
    missing = sorted(set(expected) - names)
    unexpected = sorted(names - set(state))
    wrong = sorted(n for n in names & set(state) if state[n] != shapes[n])
    if missing or unexpected or wrong:
        details = []
        if missing:
            details.append(f"missing ({len(missing)}): {', '.join(missing[:4])}")
        if unexpected:
            details.append(f"not in {arch} ({len(unexpected)}): {', '.join(unexpected[:4])}")
        for n in wrong[:4]:
            details.append(f"{n}: file {shapes[n]}, {arch} {state[n]}")
        raise CheckpointError(
            f"verification failed: the merged tensors do not fit {arch} as config.json describes it",
            details=details,
            hint="the checkpoint and its huggingface/config.json come from different models",
        )


def source_dirs(plan: MergePlan) -> list[Path]:
    """The folders a merge takes its non-weight files from (tokenizer, chat template), a later one's file winning."""
    dirs = [plan.base] if plan.base else []
    dirs += [d for d in (plan.part.hf_dir, plan.part.path) if d is not None]
    return list(dict.fromkeys(dirs))


def _extras(src_dirs: list[Path]) -> list[Path]:
    """Tokenizer, chat template, generation config: every file that is not weights, training state or a config
    the merge writes itself (a later folder's file wins)."""
    out: dict[str, Path] = {}
    for d in src_dirs:
        for f in sorted(d.iterdir()) if d.is_dir() else []:
            skip = (
                not f.is_file()
                or f.name in _NOT_COPIED
                or f.name.endswith(_WEIGHTS)
                or f.name.startswith((".", "optimizer", "rng_state", "adapter_"))
            )
            if not skip:
                out[f.name] = f
    return list(out.values())


def merge(
    prepared: tuple[MergePlan, Source, Lora | None, dict],
    max_shard_bytes: int = 5 << 30,
    progress: Callable[[int, int], None] | None = None,
) -> MergeResult:
    """Write what `plan_merge` opened and checked; verify it; rename it into place."""
    import time

    start = time.monotonic()
    plan, source, lora, config = prepared
    target = DTYPES[plan.dtype]
    skip = _tied(config, set(source.specs))
    names = [n for n in source.specs if n not in skip]
    tmp = plan.out.parent / f".{plan.out.name}.partial-{os.getpid()}"
    plan.out.parent.mkdir(parents=True, exist_ok=True)
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    done = 0  # bytes of the tensors written so far
    try:

        def tick(n: int) -> None:
            nonlocal done
            done += n
            if progress:
                progress(done, plan.bytes)

        files = write_safetensors(source, names, tmp, target, max_shard_bytes, tick)
        config = dict(config)
        config.pop("torch_dtype", None)
        config["dtype"] = str(target).removeprefix("torch.")
        if skip:
            config["tie_word_embeddings"] = True
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        for f in _extras(source_dirs(plan)):
            shutil.copy2(f, tmp / f.name)
        _write_card(plan, tmp)
        verify_written(source, names, files, target)
        check_architecture(tmp, set(names), {n: source.specs[n].shape for n in names})
        changed = _lora_changed(source, lora, plan.base, names, files, target) if lora is not None else 0
        if plan.out.exists():  # --force: the old model goes only once the new one is complete
            old = plan.out.parent / f".{plan.out.name}.old-{os.getpid()}"
            plan.out.rename(old)
            tmp.rename(plan.out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(plan.out)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError) and e.errno in _FULL:
            raise _disk_full(plan, done) from None
        raise
    files = [plan.out / f.name for f in files]
    return MergeResult(plan, files, time.monotonic() - start, changed)


def _write_card(plan: MergePlan, folder: Path) -> None:
    """The merged model's card (README.md): its run, lineage, settings and metrics."""
    from trainctl.ckpt.card import card, origin, write_ours

    o = origin(plan.checkpoint, base_dir=plan.base)
    usage = [
        f"trainctl chat {plan.out}                   # talk to it",
        f"trainctl train model.path={plan.out} ...   # train on from it",
        f"trainctl ckpt export {plan.out} --to gguf  # a GGUF file for llama.cpp, Ollama and LM Studio",
    ]
    write_ours(folder / "README.md", card(o, "merge", usage=usage))


def _lora_changed(source, lora: Lora, base_dir, names, files, dtype) -> int:
    """How many folded tensors differ from the base model's: none means the merge wrote the base model back
    (verl #4553, #7285), which is an error, not a success."""
    from safetensors import safe_open

    base = source.base if isinstance(source, FoldedSource) else None
    targets = [n for n in names if n in lora.factors or n in lora.replaced]
    handles = {f: safe_open(str(f), framework="pt") for f in files}
    where = {n: h for h in handles.values() for n in h.keys()}  # noqa: SIM118
    changed = 0
    for n in targets:
        got = where[n].get_tensor(n)
        before = base.full(n).to(got.dtype) if base is not None else None
        if before is None or not torch.equal(got, before):
            changed += 1
    if targets and changed == 0:
        raise CheckpointError(
            f"the merged model equals its base model: the adapter's {len(targets)} LoRA-changed tensors are "
            f"unchanged after folding at {_dtype_name(dtype)}",
            details=["the adapter's lora_B is zero (an untrained adapter), or its updates vanish at this precision"],
            hint="merge a later checkpoint, or keep more precision: --dtype fp32",
        )
    return changed
