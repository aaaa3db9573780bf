"""What `trainctl eval MODEL` evaluates: a model option by name, a Hugging Face folder, a run folder (its latest or
every checkpoint) or one checkpoint; and the model folder each one is loaded from.

Checkpoints are read through trainctl.ckpt: a full Hugging Face model is loaded where it is; verl's FSDP shards and
LoRA adapters are merged (verified, as `trainctl ckpt merge` does) into trainctl's cache once and reused, so the
checkpoint itself is never written to.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from trainctl.ckpt.layout import Checkpoint, list_checkpoints, read_checkpoint
from trainctl.errors import TrainctlError, UsageError


@dataclass
class Target:
    """One model to score: one row of the table."""

    label: str  # "base", "step 20", the model's name
    step: int | None  # the step its metrics are logged at (0 for the model a run started from)
    checkpoint: Checkpoint | None = None  # None: a plain model folder
    folder: Path | None = None  # a Hugging Face folder to load as it is (else the checkpoint is merged)

    @property
    def source(self) -> Path:
        return self.folder if self.folder is not None else self.checkpoint.path


@dataclass
class Resolved:
    kind: str  # name | folder | run | checkpoint
    targets: list[Target]
    args: list[str] = field(default_factory=list)  # config overrides the model implies (model=NAME, a run's args)
    run_dir: Path | None = None
    name: str = ""  # for the default output folder
    family: str | None = None  # the run's algorithm family (sft, dpo, ppo), for a run or one of its checkpoints


def _run_args(run_dir: Path) -> tuple[list[str], str | None]:
    """The overrides that make eval's config the run's, and the run's algorithm family, from its run.json.

    A PPO-family run's own overrides (as `train --resume` reuses them): its reward, tools and token budgets are what
    scoring must use. An SFT or DPO run's keys are its trainer's (verl's SFT optimizer, TRL's beta), meaningless to
    the RL config eval scores with: only its model and data carry over."""
    status = run_dir / "run.json"
    if not status.is_file():
        return [], None
    try:
        record = json.loads(status.read_text())
        args, family = [str(a) for a in record.get("args", [])], record.get("family")
    except (ValueError, AttributeError) as e:
        raise TrainctlError(f"{status} is not valid JSON ({e}).", hint=f"cat {status}") from None
    if family in (None, "ppo"):
        return args, family
    chosen = [f"{group}={record[group]}" for group in ("model", "data") if record.get(group)]
    path = _saved_model_path(run_dir)
    return [*chosen, *([f"model.path={path}"] if path else [])], family


def _saved_model_path(run_dir: Path) -> str | None:
    """The model folder the run trained from (its trainctl.yaml), so that eval's base row is the run's base."""
    import yaml

    try:
        tree = yaml.safe_load((run_dir / "trainctl.yaml").read_text()) or {}
        return str(tree["model"]["path"])
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return None


def _run_of(path: Path) -> Path | None:
    """The run folder a checkpoint (or checkpoints folder) sits in: runs/<name>/checkpoints/global_step_N."""
    for parent in [path, *path.parents][:3]:
        if (parent / "run.json").is_file():
            return parent
    return None


def _step_label(c: Checkpoint) -> str:
    return f"step {c.step}" if c.step is not None else c.path.name


def resolve(model: str, each_checkpoint: bool, model_options: dict[str, Path]) -> Resolved:
    """What MODEL means. Raises with a hint when it is nothing trainctl can load."""
    path = Path(model).expanduser()
    if path.exists():
        return _resolve_path(path.resolve(), each_checkpoint)
    if model in model_options:
        if each_checkpoint:
            raise UsageError(
                f"--each-checkpoint needs a run or checkpoints folder; {model} is a model option.",
                hint=f"trainctl eval runs/<name> --each-checkpoint, or trainctl eval {model}",
            )
        return Resolved("name", [Target(model, 0)], [f"model={model}"], name=model)
    from trainctl.suggest import closest

    guess = closest(model, model_options, cutoff=0.5)
    looks_like_path = "/" in model or model.startswith((".", "~"))
    raise TrainctlError(
        f"no model, run or checkpoint {model!r}: "
        + (f"{path} does not exist." if looks_like_path else "not a folder here, and not a model option."),
        details=[f"model options: {', '.join(list(model_options)[:12])}"] if not looks_like_path else [],
        hint=(
            f"trainctl eval {guess[0]}"
            if guess
            else "trainctl eval runs/<name> (see: ls runs), or a model from `trainctl model ls`"
        ),
    )


def _resolve_path(path: Path, each_checkpoint: bool) -> Resolved:
    run_dir = _run_of(path)
    args, family = _run_args(run_dir) if run_dir else ([], None)
    name = (run_dir or path).name
    if path.is_file():
        raise TrainctlError(f"{path} is a file; eval takes a folder.", hint=f"trainctl eval {path.parent}")
    listing = list_checkpoints(path)  # raises for a run without checkpoints
    many = len(listing.checkpoints) > 1 or listing.checkpoints[0].path != path
    if not many:
        c = read_checkpoint(path)
        if each_checkpoint:
            raise UsageError(
                f"--each-checkpoint needs a run or checkpoints folder; {path} is one checkpoint.",
                hint=f"trainctl eval {run_dir or path.parent} --each-checkpoint",
            )
        if c.layout == "hf-model" and run_dir is None:
            return Resolved("folder", [Target(path.name, 0, c, path)], name=name)
        return Resolved("checkpoint", [_target(c)], args, run_dir, name, family)
    chosen = [c for c in listing.checkpoints if not c.incomplete] if each_checkpoint else [listing.latest]
    listing.chose(chosen[-1])  # what it passed over, for the command to say
    return Resolved("run", [_target(c) for c in chosen], args, run_dir, name, family)


def _target(c: Checkpoint) -> Target:
    part = c.part()
    # full weights in Hugging Face format load where they are; shards and adapters are merged first
    folder = part.path if part.kind == "hf" else None
    return Target(_step_label(c), c.step, c, folder)


def merged_folder(target: Target) -> Path:
    """The Hugging Face folder to load: the folder itself, or the checkpoint merged into the cache (once, verified:
    trainctl.ckpt.lineage.merged, as a run started from a checkpoint reads it)."""
    if target.folder is not None:
        return target.folder
    from trainctl.ckpt.lineage import merged

    return merged(target.checkpoint)
