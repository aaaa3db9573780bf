"""Reading checkpoint tensors without holding a model in memory.

Every source gives the full name, shape and dtype of each tensor up front, then the tensor itself as row blocks
(pieces along dim 0, in order): verl's FSDP2 shards are `Shard(0)` DTensors, so rank r's local tensor is the r-th
row block and nothing has to be concatenated. Shards are opened with `torch.load(mmap=True, weights_only=True)`:
nothing is unpickled beyond plain tensors, and only the pages being copied are resident; `release` gives them back
after use (pages read through a memory map count toward RSS until then).
"""

from __future__ import annotations

import ctypes
import json
import mmap
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from trainctl.ckpt.layout import CheckpointError, Part
from trainctl.ckpt.safetensors import safetensors_header

_MADV_DONTNEED = 4
_PAGE = mmap.PAGESIZE
try:
    _libc = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - not Linux
    _libc = None


# address ranges of the shard files torch.load(mmap=True) mapped in this process
_FILE_MAPPINGS: list[tuple[int, int]] = []


def note_mappings(files: list[Path]) -> None:
    """Record where these files are mapped (from /proc/self/maps), so that `release` touches nothing else."""
    names = {str(Path(f).resolve()) for f in files}
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:  # not Linux: release does nothing
        return
    for line in lines:
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5] in names:
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            _FILE_MAPPINGS.append((lo, hi))


def release(t: torch.Tensor) -> None:
    """Drop the resident pages behind a tensor read through a shard's private, read-only file mapping: they are
    re-read from the file if used again. Anything else (a tensor computed in memory, where MADV_DONTNEED would
    zero live data) is left alone: only ranges inside a mapping `note_mappings` recorded are released."""
    if _libc is None or t.device.type != "cpu" or not _FILE_MAPPINGS:
        return
    storage = t.untyped_storage()
    start, size = storage.data_ptr(), storage.nbytes()
    if size < _PAGE:
        return
    aligned = start - start % _PAGE
    if not any(lo <= aligned and start + size <= hi for lo, hi in _FILE_MAPPINGS):
        return
    _libc.madvise(ctypes.c_void_p(aligned), ctypes.c_size_t(size + start - aligned), _MADV_DONTNEED)


@dataclass
class Spec:
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


class Source:
    """Tensors by name: `specs` in writing order, `blocks(name)` their row blocks."""

    specs: dict[str, Spec]
    mapped = False  # whether blocks come from torch's file mappings (and may be released)

    def blocks(self, name: str) -> Iterator[torch.Tensor]:
        raise NotImplementedError

    def full(self, name: str) -> torch.Tensor:
        parts = list(self.blocks(name))
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)


@dataclass
class FsdpSource(Source):
    """verl's `model_world_size_W_rank_R.pt` files, one per rank."""

    part: Part
    shards: list[dict] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    specs: dict[str, Spec] = field(default_factory=dict)
    mapped = True

    def __post_init__(self):
        import logging

        import torch.distributed.tensor  # noqa: F401 - registers DTensor for weights-only loads

        # unpickling a DTensor's mesh outside a process group warns about torch.compile; we only read tensors
        logging.getLogger("torch.distributed.device_mesh").setLevel(logging.ERROR)

        folder, world = self.part.path, self.part.world_size
        present = sorted(folder.glob("model_world_size_*_rank_*.pt"))
        if world is None:
            raise CheckpointError(
                f"{folder} has no model shards (model_world_size_W_rank_R.pt) and no fsdp_config.json",
                hint=f"ls {folder}",
            )
        self.files = [folder / f"model_world_size_{world}_rank_{r}.pt" for r in range(world)]
        other = [p.name for p in present if p not in self.files]
        if other:
            raise CheckpointError(
                f"{folder}: fsdp_config.json says world size {world}, but these shards are for another world size: "
                + ", ".join(other[:4]),
                hint="keep the shards of one run per folder; world size is the number of ranks that saved them",
            )
        missing = [p for p in self.files if not p.is_file()]
        if missing:
            raise CheckpointError(
                f"missing shard {missing[0]} ({len(self.files) - len(missing)} of {world} ranks present)",
                hint="copy every rank's model_world_size_*_rank_*.pt into the folder (each rank writes its own)",
            )
        for f in self.files:
            self.shards.append(load_shard(f))
        note_mappings(self.files)
        self._plan()

    def _plan(self) -> None:
        from torch.distributed.tensor import DTensor, Replicate, Shard

        keys = list(self.shards[0])
        self.placement: dict[str, str] = {}
        for r, sd in enumerate(self.shards[1:], start=1):
            if set(sd) != set(keys):
                odd = sorted(set(sd) ^ set(keys))[:3]
                raise CheckpointError(
                    f"{self.files[r]} holds different tensors from rank 0 (e.g. {', '.join(odd)})",
                    hint="the shards come from different runs or steps: take all ranks from one global_step_N",
                )
        for key in keys:
            t = self.shards[0][key]
            if isinstance(t, DTensor):
                places = tuple(t.placements)
                if len(places) != 1 or not isinstance(places[0], Shard | Replicate):
                    raise CheckpointError(
                        f"{self.files[0]}: tensor {key} has placements {places}; trainctl merges 1-D FSDP meshes only",
                        hint="HSDP and tensor-parallel checkpoints: use `python -m verl.model_merger merge`",
                    )
                if isinstance(places[0], Shard):
                    self.placement[key] = f"shard{places[0].dim}"
                    rows = sum(sd[key]._local_tensor.shape[places[0].dim] for sd in self.shards)
                    if rows != t.shape[places[0].dim]:
                        raise CheckpointError(
                            f"{self.part.path}: tensor {key} has {rows} rows over {len(self.shards)} shards but "
                            f"{t.shape[places[0].dim]} in full",
                            hint="a shard is missing or from another run; re-copy the step folder",
                        )
                else:
                    self.placement[key] = "replicate"
            else:
                self.placement[key] = "replicate"
            self.specs[key] = Spec(key, tuple(t.shape), t.dtype)

    def _local(self, rank: int, key: str) -> torch.Tensor:
        t = self.shards[rank][key]
        return t._local_tensor if hasattr(t, "_local_tensor") else t

    def blocks(self, name: str) -> Iterator[torch.Tensor]:
        how = self.placement[name]
        if how == "replicate":
            yield self._local(0, name)
        elif how == "shard0":
            for r in range(len(self.shards)):
                yield self._local(r, name)
        else:  # sharded along another dim: whole tensor at once (bounded by the largest tensor)
            dim = int(how[5:])
            yield torch.cat([self._local(r, name) for r in range(len(self.shards))], dim=dim)


def load_shard(path: Path) -> dict:
    try:
        sd = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    except Exception as e:  # a truncated zip, a pickle with code in it, a file that is not torch's
        size = path.stat().st_size if path.exists() else 0
        raise CheckpointError(
            f"cannot read {path} ({size:,} bytes): {str(e).splitlines()[0][:200]}",
            hint="the file is truncated or not a torch checkpoint; copy it again from where the run saved it",
        ) from None
    if not isinstance(sd, dict):
        raise CheckpointError(f"{path} holds a {type(sd).__name__}, not a state dict")
    return sd


_ST_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "BF16": torch.bfloat16,
    "F16": torch.float16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
ST_NAMES = {v: k for k, v in _ST_DTYPES.items()}


def weight_files(folder: Path, prefix: str = "") -> list[Path]:
    """The safetensors files of a Hugging Face folder, from its index when it has one."""
    index = folder / f"{prefix}model.safetensors.index.json"
    if index.is_file():
        names = dict.fromkeys(json.loads(index.read_text())["weight_map"].values())
        missing = [n for n in names if not (folder / n).is_file()]
        if missing:
            raise CheckpointError(
                f"{folder / missing[0]} is missing ({index.name} lists {len(names)} files)",
                hint="copy every model-*-of-*.safetensors file",
            )
        return [folder / n for n in names]
    return sorted(folder.glob(f"{prefix}*.safetensors"))


@dataclass
class SafetensorsSource(Source):
    """The tensors of Hugging Face safetensors files, read a row block at a time."""

    files: list[Path]
    specs: dict[str, Spec] = field(default_factory=dict)
    block_bytes: int = 64 << 20

    def __post_init__(self):
        from safetensors import safe_open

        if not self.files:
            raise CheckpointError("no *.safetensors files to read", hint="pytorch_model.bin folders: re-save them")
        self._where: dict[str, object] = {}
        for f in self.files:
            for name, v in safetensors_header(f).items():
                if v["dtype"] not in _ST_DTYPES:
                    raise CheckpointError(f"{f}: tensor {name} has dtype {v['dtype']}, which trainctl cannot merge")
                self.specs[name] = Spec(name, tuple(v["shape"]), _ST_DTYPES[v["dtype"]])
            handle = safe_open(str(f), framework="pt")
            for name in handle.keys():  # noqa: SIM118 - safe_open is not a dict
                self._where[name] = handle

    def blocks(self, name: str) -> Iterator[torch.Tensor]:
        spec, handle = self.specs[name], self._where[name]
        if len(spec.shape) == 0 or spec.numel == 0:
            yield handle.get_tensor(name)
            return
        row = max(1, spec.numel // spec.shape[0] * spec.dtype.itemsize)
        step = max(1, self.block_bytes // row)
        sl = handle.get_slice(name)
        for i in range(0, spec.shape[0], step):
            yield sl[i : i + step]


_LORA = re.compile(r"(.*)\.lora_(A|B)(?:\.default)?\.weight")


def peft_base_name(key: str) -> str:
    """PEFT's name for a base-model tensor -> the plain Hugging Face name."""
    key = key.removeprefix("base_model.model.")
    key = key.replace(".base_layer.", ".").replace(".modules_to_save.default.", ".")
    return key


@dataclass
class Lora:
    """The LoRA factors of one adapter, by the base tensor each one changes."""

    factors: dict[str, tuple[torch.Tensor, torch.Tensor]]  # base name -> (A [r, in], B [out, r])
    scale: float
    fan_in_fan_out: bool = False
    replaced: dict[str, torch.Tensor] = field(default_factory=dict)  # modules_to_save: whole tensors
    # a classifier's adapter (PEFT task SEQ_CLS, a reward model): the new head the base model lacks, and the base
    # tensors a classifier has no place for (the LM head)
    heads: dict[str, torch.Tensor] = field(default_factory=dict)
    dropped: set[str] = field(default_factory=set)

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor], config: dict, where: Path) -> Lora:
        r = int(config.get("r") or 0)
        alpha = float(config.get("lora_alpha") or 0)
        if r <= 0:
            raise CheckpointError(f"{where}: LoRA rank r={r}; an adapter needs r > 0", hint=f"cat {where}")
        if alpha == 0:
            raise CheckpointError(
                f"{where}: lora_alpha is 0 or missing, so the adapter would change nothing",
                hint="set lora_alpha in adapter_config.json (or lora_train_meta.json) to the value used in training",
            )
        scale = alpha / (r**0.5) if config.get("use_rslora") else alpha / r
        a_b: dict[str, dict[str, torch.Tensor]] = {}
        replaced = {}
        for key, t in tensors.items():
            m = _LORA.fullmatch(key)
            if m:
                a_b.setdefault(peft_base_name(m.group(1)) + ".weight", {})[m.group(2)] = t
            elif "lora_" in key:
                raise CheckpointError(
                    f"{where}: adapter tensor {key} is a kind of LoRA trainctl cannot fold (embedding or DoRA)",
                    hint="merge it with peft: PeftModel.from_pretrained(base, adapter).merge_and_unload()",
                )
            else:
                replaced[peft_base_name(key)] = t
        factors = {}
        for name, pair in a_b.items():
            if set(pair) != {"A", "B"}:
                raise CheckpointError(f"{where}: {name} has lora_{''.join(pair)} but not both lora_A and lora_B")
            factors[name] = (pair["A"], pair["B"])
        return cls(factors, scale, bool(config.get("fan_in_fan_out")), replaced)

    def as_classifier(self, base: Source) -> None:
        """A sequence-classification adapter (a reward model trained with LoRA): the saved head it trained whole
        (modules_to_save) is new to the causal LM it was trained on, which keeps its LM head."""
        for name in [n for n in self.replaced if n not in base.specs]:
            self.heads[name] = self.replaced.pop(name)
        self.dropped = {"lm_head.weight"} & set(base.specs)

    def check_against(self, base: Source, where: Path) -> None:
        for name, (a, b) in sorted(self.factors.items()):
            spec = base.specs.get(name)
            if spec is None:
                raise CheckpointError(
                    f"{where}: the adapter changes {name}, which the base model does not have",
                    hint="the adapter was trained on another base model: pass the right one with --base",
                )
            out_f, in_f = (spec.shape[1], spec.shape[0]) if self.fan_in_fan_out else spec.shape[:2]
            if b.shape[0] != out_f or a.shape[1] != in_f:
                raise CheckpointError(
                    f"{where}: the adapter's {name} is {b.shape[0]}x{a.shape[1]} but the base's is {out_f}x{in_f}",
                    hint="the adapter was trained on another base model: pass the right one with --base",
                )
        for name, t in self.replaced.items():
            if name not in base.specs or tuple(t.shape) != base.specs[name].shape:
                raise CheckpointError(
                    f"{where}: the adapter replaces {name} with shape {tuple(t.shape)}, which the base "
                    f"{'lacks' if name not in base.specs else 'has as ' + str(base.specs[name].shape)}",
                    hint="the adapter was trained on another base model: pass the right one with --base",
                )


@dataclass
class FoldedSource(Source):
    """A base model's tensors with a LoRA folded in (W + scale * B @ A), block by block."""

    base: Source
    lora: Lora
    specs: dict[str, Spec] = field(default_factory=dict)

    def __post_init__(self):
        self.specs = {n: s for n, s in self.base.specs.items() if n not in self.lora.dropped}
        self.specs.update({n: Spec(n, tuple(t.shape), t.dtype) for n, t in self.lora.heads.items()})
        self.mapped = self.base.mapped

    def blocks(self, name: str) -> Iterator[torch.Tensor]:
        whole = self.lora.replaced.get(name, self.lora.heads.get(name))
        if whole is not None:
            yield whole
            return
        pair = self.lora.factors.get(name)
        if pair is None:
            yield from self.base.blocks(name)
            return
        a, b = (x.float() for x in pair)
        row = 0
        for block in self.base.blocks(name):
            n = block.shape[0]
            # rows row..row+n of the delta: B[rows] @ A, or (B @ A).T[rows] = A.T[rows] @ B.T for fan_in_fan_out
            delta = (a.T[row : row + n] @ b.T) if self.lora.fan_in_fan_out else (b[row : row + n] @ a)
            out = block.float() + self.lora.scale * delta
            if self.base.mapped:
                release(block)
            yield out
            row += n


def lora_from_fsdp(source: FsdpSource, meta: dict | None) -> tuple[Source, Lora | None]:
    """verl shards of a LoRA run hold base weights (`...base_layer.weight`) and lora_A/B: split them."""
    lora_keys = [k for k in source.specs if "lora_" in k]
    if not lora_keys:
        return source, None
    if not meta:
        raise CheckpointError(
            f"{source.part.path} holds LoRA weights but no lora_train_meta.json with r and lora_alpha",
            hint="verl writes it beside the shards; copy it from the run",
        )
    tensors = {k: source.full(k).clone() for k in lora_keys}
    lora = Lora.from_tensors(tensors, meta, source.part.path / "lora_train_meta.json")
    return _Renamed(source, {k: peft_base_name(k) for k in source.specs if k not in tensors}), lora


@dataclass
class _Renamed(Source):
    inner: Source
    names: dict[str, str]  # inner name -> new name
    specs: dict[str, Spec] = field(default_factory=dict)

    def __post_init__(self):
        self._back = {v: k for k, v in self.names.items()}
        self.specs = {v: Spec(v, self.inner.specs[k].shape, self.inner.specs[k].dtype) for k, v in self.names.items()}
        self.mapped = self.inner.mapped

    def blocks(self, name: str) -> Iterator[torch.Tensor]:
        yield from self.inner.blocks(self._back[name])
