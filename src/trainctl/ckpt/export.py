"""`trainctl ckpt export TARGET --to gguf`: a run's latest checkpoint, a checkpoint or a Hugging Face folder as one GGUF
file (llama.cpp, Ollama, LM Studio), verified by llama.cpp itself.

Everything that can refuse the export does so before a byte is written: the format and dtype, the architecture
(Llama, Qwen2, Qwen3), the tokenizer (a byte-level BPE whose pre-tokenizer llama.cpp implements:
trainctl.ckpt.gguf_vocab), an existing output, the disk's room. A checkpoint that is not a Hugging Face folder
(verl's shards, a LoRA adapter) is then merged as `ckpt merge` merges it, into trainctl's cache (once per checkpoint:
trainctl.ckpt.lineage.merged). The file is written to a staging name beside its target (`.NAME.gguf.partial-PID`),
checked by llama.cpp (trainctl.ckpt.gguf_verify) and only then renamed into place, with its verdict
(NAME.verification.json), a model card (README.md) and an Ollama Modelfile beside it. A failed or interrupted export
removes its staging file; one killed outright leaves it, and the next export into that folder removes it.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from trainctl.ckpt.gguf_write import DTYPES, Arch, Written
from trainctl.ckpt.layout import Checkpoint, CheckpointError

FORMATS = ("gguf",)
# bytes a parameter takes in each dtype (q8_0: blocks of 32 int8 values and one float16 scale)
_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32}
_NEEDS_MERGE = ("verl-fsdp", "verl-ppo", "art")


@dataclass
class ExportPlan:
    checkpoint: Checkpoint
    folder: Path | None  # the Hugging Face folder read as it is; None: the checkpoint is merged first
    arch: Arch
    pre: str  # llama.cpp's pre-tokenizer name
    pre_how: str
    dtype: str
    out: Path
    name: str  # the model's name in the file
    params: int
    unverified: str | None  # None: llama.cpp verifies the file; else why it will not
    notes: list[str] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return int(self.params * _BYTES[self.dtype])


@dataclass
class Exported:
    plan: ExportPlan
    path: Path
    written: Written
    verdict: object | None  # gguf_verify.Verdict
    beside: list[Path]  # the verdict, README.md and Modelfile written beside the file
    seconds: float
    merged: Path | None = None  # the cache folder a checkpoint was merged into first
    notes: list[str] = field(default_factory=list)


def _tokenizer_dir(dirs: list[Path]) -> Path:
    for d in reversed(dirs):
        if (d / "tokenizer.json").is_file():
            return d
    raise CheckpointError(
        f"no tokenizer.json in {', '.join(str(d) for d in dirs)}: a GGUF file carries its tokenizer",
        hint="a checkpoint keeps its tokenizer in huggingface/ (verl) or beside the weights (TRL); copy it back",
    )


def _params_of(folder: Path) -> int:
    from trainctl.ckpt.safetensors import safetensors_header

    total = 0
    for f in sorted(folder.glob("*.safetensors")):
        for name, spec in safetensors_header(f).items():
            if name != "__metadata__":
                n = 1
                for d in spec["shape"]:
                    n *= d
                total += n
    return total


def default_out(checkpoint: Checkpoint, name: str, dtype: str) -> Path:
    """Beside the step, as `ckpt merge` writes: runs/NAME/checkpoints/global_step_N-gguf/NAME-stepN-f16.gguf."""
    return checkpoint.path.parent / f"{checkpoint.path.name}-gguf" / f"{name}-{dtype}.gguf"


def plan_export(
    target: Path,
    to: str = "gguf",
    dtype: str = "f16",
    out: Path | None = None,
    force: bool = False,
    verify: bool = True,
) -> ExportPlan:
    """Everything checked and decided; nothing written (a checkpoint to merge is opened, not merged)."""
    from trainctl.ckpt import gguf_vocab, gguf_write
    from trainctl.ckpt.card import run_of
    from trainctl.ckpt.layout import list_checkpoints
    from trainctl.ckpt.llamacpp import unavailable

    if to not in FORMATS:
        raise CheckpointError(f"--to {to!r}: trainctl exports to {', '.join(FORMATS)}", hint="--to gguf")
    if dtype not in DTYPES:
        raise CheckpointError(f"--dtype {dtype!r} is not one of {', '.join(DTYPES)}", hint="--dtype f16")
    checkpoint = list_checkpoints(Path(target)).latest
    if checkpoint.incomplete:
        raise CheckpointError(
            f"{checkpoint.path} is incomplete: {checkpoint.incomplete}", hint="export another checkpoint of the run"
        )
    part = checkpoint.part()
    notes = [f"passed over {why} (incomplete)" for why in checkpoint.passed_over]
    if checkpoint.layout not in _NEEDS_MERGE and part.kind == "hf":
        folder: Path | None = part.path
        config = json.loads((part.path / "config.json").read_text()) if (part.path / "config.json").is_file() else {}
        tok_dir = part.path
        params = _params_of(part.path)
    else:
        from trainctl.ckpt.merge import plan_merge, source_dirs

        # opened and checked as `ckpt merge` does, into a folder never written here (the cache's is chosen later)
        merge_plan, _, lora, config = plan_merge(checkpoint.path, checkpoint.path.parent / ".export-probe", force=True)
        folder, tok_dir, params = None, _tokenizer_dir(source_dirs(merge_plan)), merge_plan.params
        what = f"LoRA r={merge_plan.lora[0]} folded into {merge_plan.base}" if lora is not None else "shards joined"
        notes.append(f"merged first as `trainctl ckpt merge` merges it ({what}), into trainctl's cache")
    arch = gguf_write.read_arch(config, str(checkpoint.path / "config.json") if folder else str(checkpoint.path))
    tj_path = tok_dir / "tokenizer.json"
    if not tj_path.is_file():
        raise CheckpointError(
            f"{tok_dir} has no tokenizer.json: a GGUF file carries its tokenizer, and trainctl reads it from there",
            hint="a model saved by transformers (save_pretrained) writes it; trainctl model import FOLDER does too",
        )
    pre, pre_how = gguf_vocab.identify(json.loads(tj_path.read_text()), tj_path)
    run = run_of(checkpoint.path.resolve())
    if run is not None:
        name = run.name + (f"-step{checkpoint.step}" if checkpoint.step is not None else "")
    else:
        name = checkpoint.path.name
    if out is None:
        path = default_out(checkpoint, name, dtype)
    else:
        out = Path(out).expanduser()
        path = out if out.suffix == ".gguf" else out / f"{name}-{dtype}.gguf"
    if path.exists() and not force:
        raise CheckpointError(
            f"{path} already exists; trainctl never overwrites a model without --force",
            hint=f"trainctl ckpt export {target} --to gguf --dtype {dtype} --out {path} --force   "
            "(or choose another --out)",
        )
    reason = unavailable() if verify else "--no-verify"
    plan = ExportPlan(checkpoint, folder, arch, pre, pre_how, dtype, path, name, params, reason, notes)
    _check_room(plan)
    return plan


def _check_room(plan: ExportPlan) -> None:
    where = plan.out.parent
    while not where.exists():
        where = where.parent
    free = shutil.disk_usage(where).free
    need = plan.bytes + (0 if plan.folder else plan.params * 4)  # a merge into the cache comes first
    if need > free:
        from trainctl.models.pull import human

        raise CheckpointError(
            f"not enough disk space for {plan.out}: the export needs about {human(need)}, and {where} has "
            f"{human(free)} free. Nothing was written.",
            hint=f"free some space there, or export elsewhere: --out /other/disk/{plan.out.name}",
        )


def _staging(out: Path) -> Path:
    return out.parent / f".{out.name}.partial-{os.getpid()}"


def _remove_stale(out: Path) -> None:
    """Staging files of exports that were killed outright (their process is gone)."""
    for f in out.parent.glob(f".{out.name}.partial-*"):
        try:
            pid = int(f.name.rsplit("-", 1)[1])
            os.kill(pid, 0)
        except ProcessLookupError:
            f.unlink(missing_ok=True)
        except (ValueError, PermissionError):
            continue


def _files_table(folder: Path, new: Path, verdict, dtype: str, size: int) -> list[dict]:
    """The GGUF files of the folder (the new one under its final name), for the card."""
    from trainctl.models.pull import human

    rows = {}
    for f in sorted(folder.glob("*.gguf")):
        v = _json(f.with_suffix(".verification.json"))
        rows[f.name] = {
            "name": f.name,
            "dtype": v.get("dtype", "?"),
            "size": human(f.stat().st_size),
            "verified": "yes" if v.get("passed") else "no",
        }
    rows[new.name] = {
        "name": new.name,
        "dtype": dtype,
        "size": human(size),
        "verified": "; ".join(verdict.lines()) if verdict is not None else "no",
    }
    return list(rows.values())


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def export(
    plan: ExportPlan,
    progress: Callable[[int], None] | None = None,
    status: Callable[[str], None] | None = None,
) -> Exported:
    """Merge if needed, write, verify, then rename into place with the verdict, card and Modelfile beside."""
    from trainctl.ckpt import card, gguf_vocab, gguf_write

    start = time.monotonic()
    say = status or (lambda _: None)
    merged = None
    if plan.folder is None:
        from trainctl.ckpt.lineage import merged as merge_into_cache

        say(f"merging {plan.checkpoint.path} into trainctl's cache")
        merged = folder = merge_into_cache(plan.checkpoint)
    else:
        folder = plan.folder
    config = json.loads((folder / "config.json").read_text())
    arch = gguf_write.read_arch(config, str(folder / "config.json"))
    vocab = gguf_vocab.read_vocab(folder, int(config["vocab_size"]))
    out = plan.out
    created = not out.parent.exists()
    out.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(out)
    staging = _staging(out)
    beside: list[Path] = []
    renamed = False
    try:
        say(f"writing {out.name} ({plan.dtype})")
        written = gguf_write.write_gguf(folder, staging, plan.dtype, arch, vocab, plan.name, progress)
        verdict = None
        if plan.unverified is None:
            from trainctl.ckpt.gguf_verify import verify

            say("verifying it with llama.cpp: tokenizer, chat template, greedy answers")
            verdict = verify(staging, folder, plan.dtype)
            verdict.file = str(out)
            if not verdict.passed:
                raise CheckpointError(
                    f"llama.cpp's check of the {plan.dtype} export failed; nothing was written",
                    details=[*verdict.lines(), *verdict.problems],
                    hint="report it with the lines above; --no-verify writes the file unchecked",
                )
        o = card.origin(plan.checkpoint)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(folder)
        stops = sorted(
            {t for t in (tokenizer.eos_token, "<|im_end|>" if "<|im_end|>" in tokenizer.get_vocab() else None) if t}
        )
        usage = [
            f"llama-server -m {out.name}            # llama.cpp: an OpenAI-compatible server on :8080",
            f"ollama create {plan.name.lower()} -f Modelfile && ollama run {plan.name.lower()}",
            f"lms import {out.name}                 # LM Studio",
        ]
        files = _files_table(out.parent, out, verdict, plan.dtype, written.bytes)
        sidecars = {
            out.with_suffix(".verification.json"): json.dumps(_verdict_json(plan, verdict, vocab), indent=2) + "\n"
        }
        sidecars[out.parent / "README.md"] = card.card(o, "gguf", files, usage)
        sidecars[out.parent / "Modelfile"] = card.modelfile(out.name, tokenizer, stops)
        os.replace(staging, out)
        renamed = True
        for path, text in sidecars.items():
            if card.write_ours(path, text) if path.name in ("README.md", "Modelfile") else _write(path, text):
                beside.append(path)
    except BaseException:
        staging.unlink(missing_ok=True)
        if renamed:  # a failure writing what goes beside it: the export is not done, so nothing of it stays
            for f in (out, out.with_suffix(".verification.json")):
                f.unlink(missing_ok=True)
        if created and not any(out.parent.iterdir()):
            out.parent.rmdir()
        raise
    notes = [f"{p.name} is not trainctl's: left as it was" for p in sidecars if p not in beside]
    written.path = out
    return Exported(plan, out, written, verdict, beside, time.monotonic() - start, merged, notes)


def _write(path: Path, text: str) -> bool:
    from trainctl.paths import atomic_write_text

    atomic_write_text(path, text)
    return True


def _verdict_json(plan: ExportPlan, verdict, vocab) -> dict:
    base = {"pre_tokenizer": vocab.pre, "identified": vocab.pre_how, "architecture": plan.arch.name}
    if verdict is None:
        return {**base, "dtype": plan.dtype, "passed": None, "not_verified": plan.unverified}
    return {**base, **verdict.to_json(), "summary": verdict.lines()}
