"""Which model a name means, where it lives, and what is on disk: the model group, pulled folders, manifests.

One name means one model everywhere: `trainctl model pull qwen2.5-7b` writes to the `path` that
`trainctl train model=qwen2.5-7b` reads. A repository id (`Qwen/Qwen2.5-7B-Instruct`) that a group option names
lands in that option's path too; any other goes to `<paths.models>/<org>--<name>`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from trainctl.errors import TrainctlError
from trainctl.paths import atomic_write_text

if TYPE_CHECKING:
    from trainctl.config.schema import Model
    from trainctl.config.search import SearchPath

# written into every model folder trainctl makes (pulled, or built by `model init`)
MANIFEST = "trainctl-model.json"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


class ModelError(TrainctlError):
    """A model cannot be found, downloaded or read as asked."""


@dataclass
class ModelRef:
    """A model by name: the group option (if any), its hub repositories and its folder."""

    name: str  # the group option, or the repository id
    path: Path
    hf_repo: str | None = None
    ms_repo: str | None = None
    option: Model | None = None  # the resolved model option, when the name is one

    @property
    def label(self) -> str:
        return self.name if self.option else (self.hf_repo or self.ms_repo or self.name)


@dataclass
class OnDisk:
    """What a model folder holds."""

    path: Path
    exists: bool
    size_bytes: int = 0
    manifest: dict = field(default_factory=dict)
    complete: bool = False
    problem: str | None = None  # why it is not complete


def models_dir(search: SearchPath | None = None) -> Path:
    from trainctl.config.load import load

    return Path(load([], search).cfg.paths.models).expanduser()


def _options(search: SearchPath | None = None) -> dict[str, Model]:
    """Every model option, the user's config folders' (--config-dir, ./conf) with the built-in ones."""
    from trainctl.config.load import load_option
    from trainctl.config.search import SearchPath

    search = search or SearchPath.default()
    return {name: load_option("model", name, search) for name in search.options("model")}


def imported_option(name: str, search: SearchPath | None = None) -> Path | None:
    """The option file `trainctl model import --name NAME` wrote into trainctl's home for NAME, if NAME is one."""
    from trainctl.config.search import SearchPath
    from trainctl.paths import home_conf_dir

    file = (search or SearchPath.default()).options("model").get(name)
    if file is None or home_conf_dir().resolve() not in file.resolve().parents:
        return None
    return file


def folder_name(repo_id: str) -> str:
    return repo_id.replace("/", "--")


def resolve_ref(name: str, out: Path | None = None, search: SearchPath | None = None) -> ModelRef:
    """A group option name (found in the user's config folders, then the built-in ones), a repository id
    (org/name), or a local folder."""
    from trainctl.config.load import load, load_option

    if "/" not in name and not Path(name).expanduser().is_dir():
        model = load_option("model", name, search)
        if model is None:
            load([f"model={name}"], search)  # raises: an unknown model, with the options it may have meant
        return ModelRef(name, Path(out or model.path).expanduser(), model.hf_repo, model.ms_repo, model)
    local = Path(name).expanduser()
    if local.is_dir() and (local / "config.json").is_file():
        manifest = read_manifest(local)
        return ModelRef(str(local), local, manifest.get("hf_repo"), manifest.get("ms_repo"))
    for option, model in _options(search).items():
        if name in (model.hf_repo, model.ms_repo):
            return ModelRef(option, Path(out or model.path).expanduser(), model.hf_repo, model.ms_repo, model)
    if name.count("/") != 1 or not all(name.split("/")):
        raise ModelError(
            f"{name!r} is neither a model option, a repository id (org/name) nor a model folder.",
            hint="trainctl model ls lists the options",
        )
    return ModelRef(name, Path(out or models_dir(search) / folder_name(name)).expanduser(), name, name)


def read_manifest(path: Path) -> dict:
    try:
        return json.loads((Path(path) / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}


def write_manifest(path: Path, manifest: dict) -> None:
    manifest = {**manifest, "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    atomic_write_text(Path(path) / MANIFEST, json.dumps(manifest, indent=2) + "\n")


def folder_size(path: Path) -> int:
    """Bytes under a folder, leaving out the download cache huggingface_hub keeps in it."""
    total = 0
    for f in path.rglob("*"):
        if f.is_file() and ".cache" not in f.relative_to(path).parts:
            total += f.stat().st_size
    return total


def on_disk(path: Path) -> OnDisk:
    """Whether a folder holds a whole model: its manifest's files at their sizes, or (without one) a config and
    weights."""
    path = Path(path).expanduser()
    if not path.is_dir():
        return OnDisk(path, False)
    manifest = read_manifest(path)
    state = OnDisk(path, True, folder_size(path), manifest)
    files = manifest.get("files")
    if manifest and not manifest.get("complete", True):
        state.problem = "the pull did not finish (run it again to resume)"
    elif files:
        for rel, size in files.items():
            f = path / rel
            if not f.is_file():
                state.problem = f"{rel} is missing"
                break
            if f.stat().st_size != size:
                state.problem = f"{rel} is {f.stat().st_size} bytes, expected {size}"
                break
    elif not (path / "config.json").is_file():
        state.problem = "no config.json"
    elif not any(f.suffix in WEIGHT_SUFFIXES for f in path.iterdir()):
        state.problem = "no weights"
    state.complete = state.problem is None
    return state


@dataclass
class Listed:
    name: str
    repo: str | None
    disk: OnDisk
    kind: str = "causal_lm"  # or reward (a model option's kind; a folder's config.json architecture)


def catalog(search: SearchPath | None = None) -> list[Listed]:
    """Every model option (the user's config folders' too), then every other model folder under paths.models."""
    out = []
    claimed = set()
    for name, model in _options(search).items():
        path = Path(model.path).expanduser()
        claimed.add(path.resolve())
        out.append(Listed(name, model.hf_repo or model.ms_repo, on_disk(path), model.kind))
    base = models_dir(search)
    if base.is_dir():
        for d in sorted(base.iterdir()):
            if d.is_dir() and not d.name.startswith(".") and d.resolve() not in claimed:
                manifest = read_manifest(d)
                out.append(Listed(d.name, manifest.get("repo"), on_disk(d), folder_kind(d)))
    return out


def folder_kind(path: Path) -> str:
    """reward for a sequence classifier with one label (config.json), else causal_lm."""
    try:
        config = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return "causal_lm"
    arch = (config.get("architectures") or [""])[0]
    labels = len(config.get("id2label") or {}) or config.get("num_labels", 2)
    return "reward" if arch.endswith("ForSequenceClassification") and labels == 1 else "causal_lm"
