"""Training from a run: `model=runs/NAME` (its latest whole checkpoint) or `model.path=runs/NAME/checkpoints/
global_step_N` (that one) start SFT, DPO or RL from what another run trained; `reward.model=runs/NAME` scores RL with
the reward model a run trained (algorithm=rm).

The checkpoint is merged once, verified, into trainctl's cache (as `ckpt merge` and `eval` do: shards gathered,
LoRA adapters folded in), and the new run reads that folder: `model=<the source run's model option>
model.path=<the merged folder>`, so its tokenizer, chat template and memory estimate are the base model's. Where the
model came from is the run's lineage, kept in its lock.json and shown by `runs show`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from trainctl.ckpt.layout import Checkpoint, CheckpointError, list_checkpoints
from trainctl.errors import TrainctlError
from trainctl.paths import cache_dir

# layouts a trainer cannot read as they are: shards to gather, adapters to fold in
_NEEDS_MERGE = ("verl-fsdp", "verl-ppo", "art")


@dataclass
class Lineage:
    """Where a run's starting model came from."""

    source: str  # what was asked for: runs/sft, runs/sft/checkpoints/global_step_16
    run: str | None  # the run folder it belongs to
    checkpoint: str  # the checkpoint folder
    step: int | None
    base: str | None  # the source run's model option (the model its lineage starts from)
    merged: str  # the Hugging Face folder the new run trains from
    parent: dict | None = None  # the source run's own lineage, when it too started from a run

    def to_json(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        """`runs/sft step 16 (model=tiny)`, and further back when the source had a lineage too."""
        where = self.run or self.checkpoint
        text = f"{where} step {self.step}" if self.step is not None else where
        if self.base:
            text += f" (model={self.base})"
        if self.parent:
            text += f" <- {Lineage(**self.parent).describe()}"
        return text


def merged(checkpoint: Checkpoint) -> Path:
    """A checkpoint as a Hugging Face folder: merged into the cache once (the key is the checkpoint's path and its
    files' sizes and times, so a rewritten checkpoint is merged again), or the folder itself when it is one."""
    from trainctl.ckpt.merge import merge, plan_merge

    if checkpoint.incomplete:
        raise CheckpointError(
            f"{checkpoint.path} is incomplete: {checkpoint.incomplete}", hint="choose another checkpoint of the run"
        )
    part = checkpoint.part()
    if checkpoint.layout not in _NEEDS_MERGE and part.kind == "hf":
        return part.path
    stamp = hashlib.sha256(str(part.path).encode())
    for f in sorted(part.path.rglob("*")):
        if f.is_file():
            st = f.stat()
            stamp.update(f"{f.relative_to(part.path)}:{st.st_size}:{st.st_mtime_ns}".encode())
    out = cache_dir() / "merged" / f"{checkpoint.path.name}-{stamp.hexdigest()[:16]}"
    if (out / "config.json").is_file():
        return out
    merge(plan_merge(checkpoint.path, out, dtype="auto"))  # written beside, renamed into place when verified
    return out


def _looks_like_folder(value: str) -> bool:
    return "/" in value or value.startswith((".", "~"))


def _run_of(path: Path) -> Path | None:
    for parent in [path, *path.parents][:3]:
        if (parent / "run.json").is_file():
            return parent
    return None


def _record(run: Path | None) -> dict:
    if run is None:
        return {}
    try:
        return json.loads((run / "run.json").read_text())
    except (OSError, ValueError):
        return {}


def _parent(run: Path | None) -> dict | None:
    if run is None:
        return None
    try:
        return json.loads((run / "lock.json").read_text()).get("lineage")
    except (OSError, ValueError, AttributeError):
        return None


def resolve_source(value: str, key: str) -> Lineage | None:
    """The lineage `key=value` means when value is a run or a checkpoint trainctl must merge; None when it is
    something else (a model option, a Hugging Face folder)."""
    path = Path(value).expanduser()
    if not _looks_like_folder(value) and not (path.is_dir() and _run_of(path.resolve())):
        return None
    if not path.exists():
        if key == "model":
            raise TrainctlError(
                f"model={value}: no run or checkpoint there.",
                hint="model=runs/NAME (a run folder: its latest whole checkpoint), or a model option "
                "(trainctl model ls)",
            )
        return None  # a model.path that does not exist yet: the model checks say so
    path = path.resolve()
    run = _run_of(path)
    if key != "model" and run is None and (path / "config.json").is_file():
        return None  # a plain Hugging Face folder
    try:
        listing = list_checkpoints(path)
    except CheckpointError as e:
        raise TrainctlError(f"{key}={value}: {e.message}", hint=e.hint) from None
    if key != "model" and run is None and listing.latest.layout == "hf-model":
        return None
    chosen = listing.latest
    record = _record(run)
    return Lineage(
        source=value,
        run=str(run) if run else None,
        checkpoint=str(chosen.path),
        step=chosen.step,
        base=record.get("model"),
        merged=str(merged(chosen)),
        parent=_parent(run),
    )


def from_runs(words: list[str]) -> tuple[list[str], Lineage | None]:
    """The overrides with `model=RUN` / `model.path=RUN-OR-CHECKPOINT` replaced by the model they mean (merged into
    the cache), and that model's lineage; the overrides unchanged when none names a run."""
    out: list[str] = []
    lineage: Lineage | None = None
    for word in words:
        key, eq, value = word.partition("=")
        found = resolve_source(value, key) if eq and key in ("model", "model.path") else None
        if found is None:
            out.append(word)
            continue
        lineage = found
        if found.base:
            out.append(f"model={found.base}")
        out.append(f"model.path={found.merged}")
    return out, lineage


@dataclass(frozen=True)
class OtherModel:
    """A setting that may name another run's model, beside model=: what that run must have trained, where the
    lineage goes in lock.json, and how the plan and `runs show` name it."""

    key: str
    rm: bool  # True: a reward model (algorithm=rm); False: a model that writes answers (any other algorithm)
    lock_key: str
    label: str  # the plan's line
    shown: str  # runs show's field


OTHER_MODELS = (
    OtherModel("reward.model", True, "reward_lineage", "Reward model from", "reward by"),
    OtherModel("distillation.teacher", False, "teacher_lineage", "Teacher from", "taught by"),
)


def others_from_runs(words: list[str]) -> tuple[list[str], dict[str, Lineage]]:
    """The overrides with `reward.model=RUN` (a reward model a run trained: algorithm=rm) or `distillation.teacher=RUN`
    (a model a run trained, to teach a student) replaced by the model they mean (the run's latest checkpoint, or the
    one named; shards and adapters merged into the cache once), and each one's lineage by setting; the overrides
    unchanged where none names a run."""
    settings = {o.key: o for o in OTHER_MODELS}
    out: list[str] = []
    found: dict[str, Lineage] = {}
    for word in words:
        key, eq, value = word.partition("=")
        other = settings.get(key) if eq else None
        if other is None:
            out.append(word)
            continue
        path = Path(value).expanduser()
        record = _record(_run_of(path.resolve())) if path.exists() else {}
        family = record.get("family")
        if family is not None and (family == "rm") != other.rm:  # said before a checkpoint is merged for nothing
            trained = record.get("algorithm")
            if other.rm:
                raise TrainctlError(
                    f"{key}={value}: that run trained algorithm={trained}, a model that writes answers, not a "
                    "reward model that scores them.",
                    hint="train a reward model first: trainctl train algorithm=rm ... (e.g. recipe=rm-arith-tiny-cpu), "
                    f"then {key}=runs/NAME",
                )
            raise TrainctlError(
                f"{key}={value}: that run trained a reward model (algorithm=rm), which scores answers; a teacher "
                "writes them.",
                hint=f"{key}=runs/NAME of a run that trained a model to answer (sft, dpo, grpo, ...), or a model "
                "option",
            )
        lineage = resolve_source(value, key)
        if lineage is None:
            out.append(word)
            continue
        found[key] = lineage
        out.append(f"{key}={lineage.merged}")
    return out, found
