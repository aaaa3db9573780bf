"""What every backend shares: turning the trainctl config into the backend's own config.

A backend config is built in three layers, later ones winning:
  1. the backend's defaults (verl's composed YAML, TRL's dataclass defaults);
  2. the mapping table conf/mapping/<backend>.yaml, which reads trainctl's groups (model, data, hardware, logger, run),
     and the keys the backend computes in Python (`Backend.computed`: verl's tool keys);
  3. the keys set under the trainctl config's `verl:` / `trl:` node by algorithm files, recipes and the command line.
Every key of layers 2 and 3 is checked against the real key tree of layer 1 before anything is merged.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf, open_dict

from trainctl.config.origins import COMMAND_LINE
from trainctl.config.overrides import render_override, render_value
from trainctl.config.resolvers import UNSET
from trainctl.errors import Problem
from trainctl.suggest import closest_key

if TYPE_CHECKING:
    from trainctl.config.compose import Composition
    from trainctl.config.schema import Config


JOB_PYTHON = "python"  # in a Ray job: the interpreter on the PATH of the cluster's `ray start`


def python_for(config_dir: str | None) -> str:
    """This environment's interpreter for a local launch (the venv need not be activated); the cluster's for a job."""
    return JOB_PYTHON if config_dir == JOB_CONFIG_DIR else sys.executable


def torchrun_for(config_dir: str | None) -> list[str]:
    if config_dir == JOB_CONFIG_DIR:
        return ["torchrun"]
    beside = Path(sys.executable).parent / "torchrun"
    return [str(beside)] if beside.is_file() else [sys.executable, "-m", "torch.distributed.run"]


# One process on this machine needs no torchrun agent: the environment it would give its one worker (a process group
# of one, its store on a port the OS picks). The agent is a Python importing torch before the trainer starts: ~2 s of
# CPU and of waiting per run on 2 cores.
ONE_PROCESS_ENV = {
    "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "0",
}  # fmt: skip


def local_launch(config_dir: str | None, nproc: int, entry: str) -> tuple[list[str], dict[str, str]]:
    """The command and environment that start `python -m entry` as nproc processes on this machine: torchrun's agent
    for several, the trainer itself for one."""
    if nproc == 1:
        return [python_for(config_dir), "-u", "-m", entry], dict(ONE_PROCESS_ENV)
    return [*torchrun_for(config_dir), "--standalone", "--nnodes=1", f"--nproc_per_node={nproc}", "-m", entry], {}


# the placeholder a Ray job's entrypoint uses for its working dir (expanded by the job's shell)
JOB_CONFIG_DIR = "@PWD@"


@dataclass
class Command:
    """How a run starts: the process to launch, its environment additions, and the launcher that starts it."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    launcher: str = "local"
    # a longer equivalent written with the backend's own overrides (the raw command a user could type)
    raw_argv: list[str] = field(default_factory=list)
    # where the backend has no raw command of its own: what the launch line runs instead (command.sh says so)
    raw_note: str = ""


@dataclass
class BuiltConfig:
    cfg: DictConfig
    leaves: dict[str, Any]  # every key trainctl sets, path -> value, in the order applied
    origins: dict[str, str | None]  # path -> mapping file or "command line"; None: a config file (see origin_of)
    added: set[str]  # paths not in the backend's defaults (written with + in the raw command)
    defaults: dict = field(default_factory=dict)  # the backend's own defaults (plain, unresolved): what it would use

    def raw_overrides(self) -> list[str]:
        """The backend config as overrides on top of the backend's own defaults (the raw command's arguments)."""
        return [render_override(p, v, added=p in self.added) for p, v in self.leaves.items()]


class Backend:
    """One trainer trainctl dispatches to."""

    name: str = ""
    title: str = ""
    node: str = ""  # the trainctl config node holding this backend's keys: verl or trl
    mapping: str = ""  # conf/mapping/<mapping>.yaml
    config_file: str = ""  # the file the resolved backend config is saved as in the run folder
    open_paths: tuple[str, ...] = ()  # nodes under which new keys are legitimate
    group_keys: tuple[str, ...] = ()  # backend keys that pick one of the backend's own config groups
    old_keys: dict[str, tuple[str | None, str]] = {}  # keys from older versions: (replacement, why)

    def defaults(self, group_choices: dict[str, str]) -> DictConfig:
        """The backend's default config, as a DictConfig (cached: building one from a dict costs ~80 ms)."""
        raise NotImplementedError

    def default_tree(self, group_choices: dict[str, str]) -> dict:
        """The backend's defaults as plain data (unresolved), computed once per process."""
        key = (self.name, tuple(sorted(group_choices.items())))
        if key not in _TREES:
            _TREES[key] = OmegaConf.to_container(self.defaults(group_choices), resolve=False)
        return _TREES[key]

    def known_keys(self, group_choices: dict[str, str]) -> set[str]:
        key = (self.name, tuple(sorted(group_choices.items())))
        if key not in _KEYS:
            _KEYS[key] = key_paths(self.default_tree(group_choices))
        return _KEYS[key]

    def command(self, cfg: Config, built: BuiltConfig, config_dir: str | None = None) -> Command:
        """The launch command; the backend config is read from `config_dir` (default: the run folder)."""
        raise NotImplementedError

    # -- building -------------------------------------------------------------------------------------------

    def build(self, cfg: Config, comp: Composition, problems: list[Problem]) -> BuiltConfig:
        """The backend config. Unknown keys are reported in `problems` and left out, so later checks still run."""
        mapped = resolve_mapping(comp, cfg.to_dict(), self.mapping, problems)
        origins: dict[str, str] = {path: f"conf/mapping/{self.mapping}.yaml" for path, _ in flatten(mapped)}
        for tree, origin in self.translate(cfg, comp):
            merge(mapped, tree)  # where the mapping table would have put them, for the raw command's order
            origins.update((path, origin) for path, _ in flatten(tree))
        user, user_origin = resolve_node(comp, self.node, problems)
        choices = {k: user.pop(k) for k in self.group_keys if isinstance(user.get(k), str)}
        base = self.defaults(choices)
        known = self.known_keys(choices)

        leaves: dict[str, Any] = {}
        for path, value in flatten(mapped):
            leaves[path] = value
        for path, value in flatten(user):
            leaves.pop(path, None)  # keep the order in which a user would read it
            leaves[path] = value
            origins[path] = user_origin.get(path)  # files are looked up only when needed (see origin_of)

        added: set[str] = set()
        tree = self.default_tree(choices)
        for path in list(leaves):
            if path in known:
                continue
            if self._may_add(path, comp.added) or self.declares(tree, path):
                added.add(path)  # not in the backend's YAML: written with + in the raw command
                continue
            origin = origins[path] or comp.origin(f"{self.node}.{path}") or f"{self.node}.{path}"
            problems.append(self.unknown_key(path, leaves.pop(path), known, trainctl_keys(comp), origin))
        deleted = comp.deleted & known
        for path in comp.deleted - known:
            problems.append(self.unknown_key(path, None, known, set(), COMMAND_LINE))

        built = base  # defaults() returns a fresh copy
        for path, value in leaves.items():
            OmegaConf.update(built, path, value, merge=False, force_add=True)
        for path in deleted:
            parent, _, last = path.rpartition(".")
            with open_dict(built):
                (OmegaConf.select(built, parent) if parent else built).pop(last, None)
        OmegaConf.set_struct(built, True)
        return BuiltConfig(cfg=built, leaves=leaves, origins=origins, added=added, defaults=self.default_tree(choices))

    def translate(self, cfg: Config, comp: Composition) -> list[tuple[dict, str]]:
        """Backend keys set in Python rather than by the mapping table, each tree with the origin the plan names
        (a reward kind's keys: trainctl.backends.rewards; the tools section's: trainctl.backends.tools). They go over
        the mapping table, under the user's keys."""
        return []

    def declares(self, defaults: dict, path: str) -> bool:
        """Whether the backend's config classes declare a key its default YAML leaves out (a verl dataclass field,
        or a key under a field typed as a mapping)."""
        return False

    def _may_add(self, path: str, added_on_purpose: set[str]) -> bool:
        prefixes = (*self.open_paths, *added_on_purpose)
        return any(path == p or path.startswith(p + ".") for p in prefixes)

    def unknown_key(self, path: str, value: Any, known: set[str], trainctl: set[str], origin: str) -> Problem:
        """An unknown key, with the closest real one (backend's or trainctl's) and how to fix it."""
        for old, (new, why) in self.old_keys.items():
            if path == old or path.startswith(old + "."):
                fix = f"use {new}" + (f"={render_value(value)}" if new and path == old else "") if new else None
                return Problem(
                    f"'{path}' is a key from older verl: {why}.",
                    key=path,
                    details=[f"Did you mean '{new}'?"] if new else [],
                    hint=fix or "convert the data: trainctl data convert FILE --to sft",
                )
        from trainctl.config.compose import TRAINCTL_SECTIONS

        guess = closest_key(path, known | trainctl)
        head = path.split(".")[0]
        where = "" if origin == COMMAND_LINE else f" (set in {origin})"
        if origin != COMMAND_LINE:
            hint = f"fix or remove it in {origin}"
        elif head in TRAINCTL_SECTIONS and head not in known:
            # a trainctl section the backend has no node of: nothing to add on purpose here
            hint = f"`trainctl config show` lists the {head}.* keys"
        else:
            hint = f"to add a new key on purpose, use +{path}={render_value(value)}"
        return Problem(
            f"unknown config key '{path}'{where}.",
            key=path,
            details=[f"Did you mean '{guess}'?"] if guess else [],
            hint=hint,
        )


# -- resolution -----------------------------------------------------------------------------------------------


def resolve_mapping(comp: Composition, tc: dict, mapping: str, problems: list[Problem]) -> dict:
    """The mapping table, evaluated against the resolved trainctl config; UNSET leaves are dropped."""
    from omegaconf.errors import OmegaConfBaseException

    from trainctl.config.interpolation import resolve
    from trainctl.config.yaml_files import config_file

    file = comp.search.builtin / "mapping" / f"{mapping}.yaml"
    plain = resolve(config_file(str(file))[1], tc)  # without OmegaConf's parser where it can (~0.1 s)
    if plain is not None:
        return _drop_unset(plain)
    table = OmegaConf.load(file)
    root = OmegaConf.create({**tc, "__mapping__": table})
    try:
        resolved = OmegaConf.to_container(root["__mapping__"], resolve=True)
    except OmegaConfBaseException as e:
        problems.append(Problem(f"conf/mapping/{mapping}.yaml cannot be evaluated: {str(e).splitlines()[0]}"))
        return {}
    return _drop_unset(resolved)


def _drop_unset(tree: dict) -> dict:
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict) and v:
            v = _drop_unset(v)
            if not v:
                continue
        elif v == UNSET:
            continue
        out[k] = v
    return out


def resolve_node(comp: Composition, node: str, problems: list[Problem]) -> tuple[dict, dict[str, str]]:
    """The backend node's values, each resolved in the trainctl config where it can be.

    A value that only makes sense to the backend (an interpolation into the backend's own tree) is passed on
    as written, for the backend to resolve.
    """
    from omegaconf.errors import OmegaConfBaseException

    raw = OmegaConf.to_container(comp.cfg[node], resolve=False)
    out: dict = {}
    for path, value in flatten(raw):
        if isinstance(value, str) and "${" in value:
            try:
                value = OmegaConf.select(comp.cfg, f"{node}.{path}", throw_on_missing=True)
                if OmegaConf.is_config(value):
                    value = OmegaConf.to_container(value, resolve=True)
            except OmegaConfBaseException:
                pass  # left for the backend to resolve
        set_path(out, path, value)
    cli = {b.path: COMMAND_LINE for b in comp.backend_overrides}
    return out, cli


def merge(into: dict, tree: dict) -> None:
    """Merge a nested dict into another, in place: its leaves win, its new keys go last."""
    for k, v in tree.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            merge(into[k], v)
        else:
            into[k] = v


def set_path(tree: dict, path: str, value: Any) -> None:
    """Set a dotted path in a nested dict, making the dicts on the way."""
    parts = path.split(".")
    for p in parts[:-1]:
        tree = tree.setdefault(p, {})
    tree[parts[-1]] = value


def flatten(tree: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Leaf paths of a nested dict. Empty dicts and lists are leaves."""
    if isinstance(tree, dict) and tree:
        out = []
        for k, v in tree.items():
            out.extend(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return [(prefix, tree)] if prefix else []


_KEYS: dict[tuple, set[str]] = {}
_TREES: dict[tuple, dict] = {}


def key_paths(tree: Any, prefix: str = "") -> set[str]:
    """Every path in a nested dict, inner nodes included."""
    out: set[str] = set()
    if isinstance(tree, dict):
        for k, v in tree.items():
            p = f"{prefix}.{k}" if prefix else str(k)
            out.add(p)
            out |= key_paths(v, p)
    return out


def trainctl_keys(comp: Composition) -> set[str]:
    from trainctl.config.compose import BACKEND_NODES

    raw = OmegaConf.to_container(comp.cfg, resolve=False)
    return {k for k in key_paths(raw) if k.split(".")[0] not in BACKEND_NODES}


def get(cfg: DictConfig, path: str, default: Any = None) -> Any:
    """A backend value with its interpolations resolved in the backend's own config."""
    value = OmegaConf.select(cfg, path, default=default)
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
