"""Finding checkpoints and telling their layouts apart, from files alone (no torch import).

Layouts:
- verl FSDP (SFT): `global_step_N/{model,optim,extra_state}_world_size_W_rank_R.pt`, `fsdp_config.json`,
  `huggingface/` (config and tokenizer), beside `latest_checkpointed_iteration.txt`;
- verl PPO family: the same under `global_step_N/actor/` and `global_step_N/critic/`, plus `lora_adapter/`;
- Hugging Face Trainer / TRL: `checkpoint-N/` with full weights or a PEFT adapter and `trainer_state.json`;
- ART (OpenPipe): `models/<run>/checkpoints/NNNN/` holding a PEFT adapter, beside `history.jsonl` and `model.json`;
- a plain Hugging Face model folder.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from trainctl.errors import TrainctlError
from trainctl.models.catalog import folder_size

_SHARD = re.compile(r"(model|optim|extra_state)_world_size_(\d+)_rank_(\d+)\.pt")
_STEP_DIR = re.compile(r"(?:global_step_|checkpoint-)(\d+)")
_ART_STEP = re.compile(r"\d{4,}")


class CheckpointError(TrainctlError):
    """A checkpoint that cannot be read, listed or merged."""


@dataclass
class Part:
    """One mergeable thing inside a checkpoint: verl's model/actor/critic shards, HF weights, or an adapter."""

    name: str  # "model", "actor", "critic", "adapter"
    path: Path
    kind: str  # "fsdp" | "hf" | "adapter"
    world_size: int | None = None
    fsdp_version: int | None = None
    holds: list[str] = field(default_factory=list)  # model, optimizer, extra, hf-weights, adapter
    lora: tuple[int, float] | None = None  # (rank, alpha)

    @property
    def hf_dir(self) -> Path | None:
        """Where config.json and the tokenizer live."""
        for d in (self.path / "huggingface", self.path):
            if (d / "config.json").is_file() or (d / "tokenizer_config.json").is_file():
                return d
        return None


@dataclass
class Checkpoint:
    path: Path
    layout: str  # verl-fsdp | verl-ppo | hf-trainer | art | hf-model
    step: int | None
    parts: list[Part]
    latest: bool = False
    metrics: dict = field(default_factory=dict)
    size: int = 0
    # why the checkpoint cannot be used, when its save did not finish (a file cut short, a rank's shard missing)
    incomplete: str | None = None
    # the run's incomplete checkpoints passed over when this one was chosen for it ("global_step_12: data.pt is
    # missing ..."), for the command to say so
    passed_over: list[str] = field(default_factory=list)

    def part(self, name: str | None = None) -> Part:
        """The part a merge means: the one named, else the model/actor (never the critic unless asked)."""
        if name:
            for p in self.parts:
                if p.name == name:
                    return p
            have = ", ".join(p.name for p in self.parts)
            raise CheckpointError(
                f"{self.path} has no part {name!r} (it has: {have})",
                hint=f"trainctl ckpt merge {self.path} --part {self.parts[0].name}",
            )
        for p in self.parts:
            if p.name in ("model", "actor", "adapter"):
                return p
        return self.parts[0]


@dataclass
class Listing:
    root: Path
    checkpoints: list[Checkpoint]
    metrics_source: Path | None = None
    # every metric name the run logged, at any step (not only at checkpoint steps)
    logged: list[str] = field(default_factory=list)

    @property
    def latest(self) -> Checkpoint:
        """What a run or output folder means when one checkpoint is asked for: the latest whole one (a checkpoint
        folder named on its own is that one, whole or not: what reads it checks the files it needs)."""
        if len(self.checkpoints) == 1 and self.checkpoints[0].path == self.root:
            return self.checkpoints[0]
        whole = [c for c in self.checkpoints if not c.incomplete]
        if not whole:
            c = self.checkpoints[-1]
            raise CheckpointError(f"{c.path} is incomplete: {c.incomplete}", hint="resume the run to save it again")
        return self.chose(next((c for c in whole if c.latest), whole[-1]))

    def chose(self, chosen: Checkpoint) -> Checkpoint:
        """`chosen`, with the incomplete checkpoints newer than it that were passed over noted on it."""
        chosen.passed_over = [
            f"{c.path.name}: {c.incomplete}"
            for c in self.checkpoints
            if c.incomplete and (c.step or 0) > (chosen.step or 0)
        ]
        return chosen


def _adapter_lora(folder: Path) -> tuple[int, float] | None:
    cfg = folder / "adapter_config.json"
    if not cfg.is_file():
        return None
    try:
        c = json.loads(cfg.read_text())
        return int(c.get("r") or 0), float(c.get("lora_alpha") or 0)
    except (ValueError, TypeError) as e:
        raise CheckpointError(f"{cfg} is not valid JSON: {e}") from None


def _fsdp_part(name: str, folder: Path) -> Part:
    kinds: dict[str, set[int]] = {}
    sizes = set()
    for f in folder.iterdir():
        m = _SHARD.fullmatch(f.name)
        if m:
            kinds.setdefault(m.group(1), set()).add(int(m.group(3)))
            sizes.add(int(m.group(2)))
    world = None
    version = None
    cfg = folder / "fsdp_config.json"
    if cfg.is_file():
        try:
            c = json.loads(cfg.read_text())
            world, version = c.get("world_size"), c.get("FSDP_version")
        except ValueError:
            pass
    if world is None and len(sizes) == 1:
        world = next(iter(sizes))
    holds = [
        label for key, label in (("model", "model"), ("optim", "optimizer"), ("extra_state", "extra")) if key in kinds
    ]
    hf = folder / "huggingface"
    if any(hf.glob("*.safetensors")):
        holds.append("hf-weights")
    lora = None
    meta = folder / "lora_train_meta.json"
    if meta.is_file():
        try:
            m = json.loads(meta.read_text())
            lora = int(m.get("r") or 0), float(m.get("lora_alpha") or 0)
        except ValueError:
            pass
    if (folder / "lora_adapter").is_dir():
        holds.append("adapter")
        lora = lora or _adapter_lora(folder / "lora_adapter")
    return Part(name, folder, "fsdp", world, version, holds, lora)


def _is_fsdp(folder: Path) -> bool:
    return folder.is_dir() and (
        (folder / "fsdp_config.json").is_file() or any(_SHARD.fullmatch(f.name) for f in folder.iterdir())
    )


def _hf_part(folder: Path, name: str = "model") -> Part | None:
    if (folder / "adapter_config.json").is_file():
        return Part("adapter", folder, "adapter", holds=["adapter"], lora=_adapter_lora(folder))
    if any(folder.glob("*.safetensors")) or any(folder.glob("pytorch_model*.bin")):
        holds = ["hf-weights"]
        if any(folder.glob("optimizer.*")):
            holds.append("optimizer")
        return Part(name, folder, "hf", holds=holds)
    return None


def _cut_short(folder: Path) -> list[str]:
    """Files of a verl checkpoint part whose write did not finish: torch.save writes a zip archive whose directory
    comes last, so a file cut short (a full disk, a killed trainer) has none."""
    import zipfile

    return sorted(f.name for f in folder.glob("*.pt") if not zipfile.is_zipfile(f))


def _incomplete(ckpt: Checkpoint) -> str | None:
    """Why a verl checkpoint's save did not finish, or None."""
    if ckpt.layout not in ("verl-fsdp", "verl-ppo"):
        return None
    for part in ckpt.parts:
        short = _cut_short(part.path)
        if short:
            return f"{', '.join(short)} {'is' if len(short) == 1 else 'are'} cut short (the save did not finish)"
        world = part.world_size or 1
        for kind in ("model", "optim", "extra_state"):
            ranks = {
                int(m.group(3))
                for f in part.path.iterdir()
                if (m := _SHARD.fullmatch(f.name)) and m.group(1) == kind and int(m.group(2)) == world
            }
            if ranks and ranks != set(range(world)):
                missing = sorted(set(range(world)) - ranks)
                return f"{kind} shards of rank(s) {missing} of {world} are missing (the save did not finish)"
    if ckpt.layout == "verl-ppo" and not (ckpt.path / "data.pt").is_file():
        return "data.pt is missing: verl writes it last, after the actor and critic (the save did not finish)"
    return None


def read_checkpoint(path: Path) -> Checkpoint:
    """One checkpoint folder, whichever layout it has (`incomplete` says why one cannot be used)."""
    ckpt = _read_checkpoint(path)
    ckpt.incomplete = _incomplete(ckpt)
    return ckpt


def _read_checkpoint(path: Path) -> Checkpoint:
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"no checkpoint at {path}: not a folder", hint="trainctl ckpt ls runs/<name>")
    m = _STEP_DIR.fullmatch(path.name)
    step = int(m.group(1)) if m else (int(path.name) if _ART_STEP.fullmatch(path.name) else None)
    if _is_fsdp(path):
        return Checkpoint(path, "verl-fsdp", step, [_fsdp_part("model", path)], size=folder_size(path))
    roles = [r for r in ("actor", "critic") if _is_fsdp(path / r)]
    if roles:
        return Checkpoint(path, "verl-ppo", step, [_fsdp_part(r, path / r) for r in roles], size=folder_size(path))
    part = _hf_part(path)
    if part is not None:
        if _ART_STEP.fullmatch(path.name) and path.parent.name == "checkpoints":
            layout = "art"
        elif (path / "trainer_state.json").is_file() or path.name.startswith("checkpoint-"):
            layout = "hf-trainer"
        else:
            layout = "hf-model"
        return Checkpoint(path, layout, step, [part], size=folder_size(path))
    raise CheckpointError(
        f"{path} is not a checkpoint trainctl knows",
        details=[
            "expected one of: verl shards (model_world_size_W_rank_R.pt), global_step_N/actor/, "
            "Hugging Face weights (*.safetensors), or a PEFT adapter (adapter_config.json)"
        ],
        hint=f"ls {path}",
    )


def _step_folders(root: Path) -> list[Path]:
    out = []
    for p in root.iterdir() if root.is_dir() else []:
        if p.is_dir() and (_STEP_DIR.fullmatch(p.name) or _ART_STEP.fullmatch(p.name)):
            out.append(p)
    return out


def _root_of(target: Path) -> Path:
    """The folder holding the step folders, for a run folder, an ART model folder, or the folder itself."""
    return target / "checkpoints" if _step_folders(target / "checkpoints") else target


def _latest_step(root: Path, steps: list[int]) -> int | None:
    marker = root / "latest_checkpointed_iteration.txt"
    if marker.is_file():
        try:
            return int(marker.read_text().strip())
        except ValueError:
            pass
    return max(steps) if steps else None


def list_checkpoints(target: Path) -> Listing:
    """Every checkpoint under a run folder (runs/<name>), a verl/TRL output dir, an ART model folder, or one
    checkpoint folder; newest step last, each with the metrics logged at its step."""
    from trainctl.ckpt.metrics import metrics_near

    target = Path(target)
    if not target.exists():
        raise CheckpointError(f"{target} does not exist", hint="trainctl ckpt ls runs/<name>  (see: ls runs)")
    root = _root_of(target)
    folders = _step_folders(root)
    if not folders:
        if (target / "run.json").is_file() or (target / "checkpoints").is_dir():
            raise CheckpointError(
                f"{target} has no checkpoints yet",
                hint="a run saves at its end; to save along the way: trainctl train ... run.save_every=N",
            )
        return Listing(target, [read_checkpoint(target)])
    found = []
    for f in folders:
        try:
            found.append(read_checkpoint(f))
        except CheckpointError:
            continue  # a step folder being written, or one a user emptied
    found.sort(key=lambda c: c.step or 0)
    latest = _latest_step(root, [c.step for c in found if c.step is not None and not c.incomplete])
    metrics, source = metrics_near(target, root, found)
    for c in found:
        c.latest = c.step == latest and not c.incomplete
        if latest is not None and c.step is not None and c.step > latest and not c.incomplete:
            # whole by its files, but newer than what the trainer recorded as saved: being written, or its save
            # failed after the files (verl writes the marker last)
            c.incomplete = f"newer than the latest saved step ({latest}): still being written, or its save failed"
        c.metrics = metrics.get(c.step, {}) if c.step is not None else {}
    logged = sorted({k for values in metrics.values() for k in values})
    return Listing(root, found, source, logged)
