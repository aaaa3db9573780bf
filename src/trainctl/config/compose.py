"""Compose trainctl's config groups with Hydra into one trainctl config.

The command line mixes three kinds of overrides, told apart here:
  - group choices:  `algorithm=grpo`, `recipe=quickstart`
  - trainctl keys:  any key the composed trainctl config has (`run.epochs=2`, `hardware.rollout_tp=4`)
  - backend keys:   everything else, written as in the backend's own docs (`actor_rollout_ref.actor.optim.lr=1e-6`
    for verl, `beta=0.2` for TRL), or with an explicit `verl.` / `trl.` prefix. They are stored under the
    config's `verl:` or `trl:` node, whichever backend the algorithm runs on.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf, open_dict

from trainctl.config import resolvers
from trainctl.config.overrides import Override, suggest_option
from trainctl.config.schema import BACKEND_NODES, SECTIONS, declares, moved
from trainctl.config.search import GROUPS, SearchPath
from trainctl.errors import ConfigProblems, Problem
from trainctl.facts.trl import TRAINERS

# Top-level sections of the trainctl config that are trainctl's own (declared in trainctl.config.schema).
TRAINCTL_SECTIONS = SECTIONS
# Which backend node each algorithm family's keys live under: verl's two trainers, and one family per TRL trainer
FAMILY_NODE = {"sft": "verl", "ppo": "verl", **dict.fromkeys(TRAINERS, "trl")}
PRIMARY = "trainctl"
# groups of which several options may be chosen at once (logger=[wandb,tensorboard]); their options add to dicts
MULTI_CHOICE_GROUPS = ("logger",)


@dataclass
class BackendOverride:
    """A backend key from the command line, kept with how it was written."""

    raw: str
    path: str  # inside the backend's config, without the verl./trl. prefix
    value: Any
    op: str  # set | add | force_add | delete


@dataclass
class Composition:
    """The composed trainctl config and what went into it."""

    cfg: DictConfig
    search: SearchPath
    group_overrides: list[str]
    choices: dict[str, str] = field(default_factory=dict)  # group -> option, as Hydra chose them
    trainctl_overrides: list[Override] = field(default_factory=list)
    backend_overrides: list[BackendOverride] = field(default_factory=list)

    @property
    def family(self) -> str:
        return self.cfg.algorithm.family

    @property
    def node(self) -> str:
        return FAMILY_NODE[self.family]

    @property
    def added(self) -> set[str]:
        """Backend keys the user added on purpose with `+key=value` or `++key=value`."""
        return {b.path for b in self.backend_overrides if b.op in ("add", "force_add")}

    @property
    def deleted(self) -> set[str]:
        return {b.path for b in self.backend_overrides if b.op == "delete"}

    @cached_property
    def sources(self) -> list[tuple[str, set[str]]]:
        from trainctl.config.origins import sources

        cli = {o.key for o in self.trainctl_overrides} | {f"{self.node}.{b.path}" for b in self.backend_overrides}
        return sources(self.search, self.choices, cli, PRIMARY)

    def origin(self, path: str) -> str | None:
        """The file or override that set a trainctl config key (computed on first use)."""
        from trainctl.config.origins import origin_of

        return origin_of(path, self.sources)


_USER_DIRS: list = []


def active_user_dirs() -> list:
    """The user config folders of the composition under way (read by hydra_plugins.trainctl_searchpath)."""
    return list(_USER_DIRS)


_COMPOSING = [False]


def composing() -> bool:
    """Whether a trainctl composition is under way (hydra_plugins.trainctl_searchpath reads trainctl's config
    folders through `config_file` then; other Hydra apps in the process, verl's, are left as they are)."""
    return _COMPOSING[0]


def hydra_compose(search: SearchPath, group_overrides: list[str]) -> tuple[DictConfig, dict[str, str]]:
    """Hydra's composition of the trainctl config and the group choices it made, cached per group choices and
    config files (size, time).

    Composition is deterministic given those (interpolations are kept unresolved), and skipping Hydra saves
    ~150 ms of the one second a config error is allowed to take.
    """
    import hashlib
    import pickle

    from trainctl import paths

    files = sorted(f for d in search.dirs for f in _yaml_files(d))
    stamp = [(str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files]
    key = hashlib.sha1(repr((stamp, group_overrides, "v2")).encode()).hexdigest()[:20]
    cache = paths.cache_dir() / "compose" / f"{key}.pkl"
    blob = _COMPOSED.get(key)
    if blob is not None and not cache.is_file():
        paths.atomic_write_bytes(cache, blob)
    if blob is None and cache.is_file():
        blob = cache.read_bytes()
    if blob is not None:
        try:
            result = pickle.loads(blob)  # a copy of its own for each caller: they may change it
            _remember(key, blob)
            return result
        except Exception:  # a damaged cache is rebuilt
            pass
    result = _hydra_compose(search, group_overrides)
    blob = pickle.dumps(result)
    paths.atomic_write_bytes(cache, blob)
    _remember(key, blob)
    return result


# this process's compositions (key -> pickled result), beside the cache folder's: a process that composes the same
# groups again (`model ls` composes every model option; the server, and a test session, compose the same recipes
# over and over) skips Hydra (0.2 s a composition on 2 idle cores, 0.6 s on busy ones) and the file read
_COMPOSED: dict[str, bytes] = {}
_COMPOSED_MAX = 256


def _remember(key: str, blob: bytes) -> None:
    _COMPOSED.pop(key, None)
    _COMPOSED[key] = blob  # the newest last: the oldest goes first when full
    while len(_COMPOSED) > _COMPOSED_MAX:
        _COMPOSED.pop(next(iter(_COMPOSED)))


def _yaml_files(folder: Path) -> list[Path]:
    """Every YAML file under `folder`, through links into folders (rglob skips them: the repository's conf/recipe
    links to recipes/, and a file edited behind a link must not leave a stale composition); a link back up the
    tree is walked once."""
    found, seen = [], set()
    for root, dirs, names in os.walk(folder, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        found += [Path(root, n) for n in names if n.endswith(".yaml")]
    return found


def _hydra_compose(search: SearchPath, group_overrides: list[str]) -> tuple[DictConfig, dict[str, str]]:
    """Hydra's compose API over trainctl's search path (user folders first, through trainctl's search-path
    plugin); composition failures become Problems that name the file and the fix."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException, MissingConfigException
    from omegaconf.errors import OmegaConfBaseException

    GlobalHydra.instance().clear()
    _USER_DIRS[:] = list(search.user_dirs)
    _COMPOSING[0] = True
    try:
        with initialize_config_dir(config_dir=str(search.builtin), version_base="1.3", job_name="trainctl"):
            cfg, choices = _compose_without_hydras_node(group_overrides)
    except MissingConfigException as e:
        msg = str(e).strip().splitlines()[0]
        options = list(getattr(e, "options", None) or [])
        raise ConfigProblems(
            [Problem(msg, hint=f"available: {', '.join(options)}" if options else "see `trainctl config groups`")]
        ) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{mark.name}, line {mark.line + 1}" if mark else "a config file"
        raise ConfigProblems(
            [
                Problem(
                    f"{where} is not valid YAML: {getattr(e, 'problem', None) or e}.",
                    details=[getattr(e, "context", None) or ""] if getattr(e, "context", None) else [],
                    hint="fix the file's syntax (quote values that contain : [ ] { } #)",
                )
            ]
        ) from None
    except (HydraException, OmegaConfBaseException) as e:
        lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
        raise ConfigProblems(
            [Problem(lines[0] if lines else type(e).__name__, details=lines[1:4], hint="see `trainctl config groups`")]
        ) from None
    finally:
        _USER_DIRS.clear()
        _COMPOSING[0] = False
        GlobalHydra.instance().clear()
    with open_dict(cfg):
        cfg.pop("hydra", None)
    return cfg, choices


def _compose_without_hydras_node(group_overrides: list[str]) -> tuple[DictConfig, dict[str, str]]:
    """What Hydra's compose API does (hydra.compose -> ConfigLoaderImpl._load_configuration_impl, hydra-core 1.3),
    less Hydra's own app config (the `hydra` node: its job, run and sweep settings, logging, launcher, sweeper, help):
    half of every composition's time (0.23 -> 0.12 s of CPU, measured), and trainctl drops the node. The same steps,
    through the same loader: the sweep check, the defaults tree, the merge, the value overrides in struct mode; the
    group choices from the defaults tree, as Hydra copies them to hydra.runtime.choices (tests/config/test_compose.py
    compares both ways' configs and choices)."""
    from hydra._internal.defaults_list import create_defaults_list
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import ConfigCompositionException
    from hydra.types import RunMode
    from omegaconf.errors import OmegaConfBaseException

    loader = GlobalHydra.instance().config_loader()
    try:
        loader.ensure_main_config_source_available()
        parsed, repo = loader._parse_overrides_and_create_caching_repo(PRIMARY, group_overrides)
        loader.validate_sweep_overrides_legal(overrides=parsed, run_mode=RunMode.RUN, from_shell=False)
        defaults = create_defaults_list(
            repo=repo, config_name=PRIMARY, overrides_list=parsed, prepend_hydra=False, skip_missing=False
        )
        cfg = loader._compose_config_from_defaults_list(defaults=defaults.defaults, repo=repo)
        OmegaConf.set_struct(cfg, True)
        loader._apply_overrides_to_config(defaults.config_overrides, cfg)
    except OmegaConfBaseException as e:  # as Hydra's load_configuration raises it
        raise ConfigCompositionException().with_traceback(e.__traceback__) from e
    known = defaults.overrides.known_choices
    return cfg, {str(k): str(v) for k, v in known.items() if v is not None and "hydra" not in k}


def _env_takes_data_and_reward(group_overrides: list[str]) -> list[str]:
    """An environment (env=NAME, not none) supplies the run's prompts and scoring: data=env and reward=env, which
    read it. A data= or reward= beside it is refused rather than silently dropped or silently winning."""
    chosen = dict(o.split("=", 1) for o in group_overrides if "@" not in o.split("=", 1)[0])
    env = chosen.get("env")
    if env in (None, "none"):
        return []
    clash = [f"{g}={chosen[g]}" for g in ("data", "reward") if chosen.get(g) not in (None, "env")]
    if clash:
        raise ConfigProblems(
            [
                Problem(
                    f"env={env} supplies the run's prompts and their scoring, which {' and '.join(clash)} would "
                    "supply too.",
                    key="env",
                    hint=f"drop {' '.join(clash)} (env={env} reads its own), or drop env={env} (env=none) to train "
                    "on the data option",
                )
            ]
        )
    return [f"{g}=env" for g in ("data", "reward") if g not in chosen]


def env_digest(env) -> str:
    """A short digest of an environment's settings: the name of the folder its rows are generated into."""
    import hashlib
    import json

    settings = OmegaConf.to_container(env, resolve=True)
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _group_override(o: Override, search: SearchPath, problems: list[Problem]) -> str | None:
    group = o.key
    options = list(search.options(group))
    if o.op != "set" or o.package:
        problems.append(Problem(f"'{o.raw}': a group is chosen with {group}=OPTION.", key=group))
        return None
    choices = o.value if group in MULTI_CHOICE_GROUPS and isinstance(o.value, list) and o.value else [o.value]
    unknown = [c for c in choices if not isinstance(c, str) or c not in options]
    for choice in unknown:
        guess = suggest_option(str(choice), options)
        problems.append(
            Problem(
                f"unknown {group} '{choice}'.",
                key=group,
                details=[f"Did you mean '{guess}'?"] if guess else [],
                hint=f"available {group} options: {', '.join(options)} (your own go in ./conf/{group}/NAME.yaml)",
            )
        )
    if unknown:
        return None
    if len(choices) > 1:
        return f"{group}=[{','.join(choices)}]"  # Hydra merges the options in order
    choice = choices[0]
    # recipes write anywhere in the config, so they are mounted at the root
    return f"recipe@_global_={choice}" if group == "recipe" else f"{group}={choice}"


def compose(overrides: list[Override], search: SearchPath) -> Composition:
    """Compose the trainctl config for one set of overrides."""
    resolvers.register()
    problems: list[Problem] = []
    group_overrides: list[str] = []
    maybe_trainctl: list[Override] = []
    backend: list[tuple[Override, str | None, str]] = []  # (override, explicit node, path)

    for o in overrides:
        head, _, rest = o.key.partition(".")
        if o.key in GROUPS:
            choice = _group_override(o, search, problems)
            if choice:
                group_overrides.append(choice)
        elif head in BACKEND_NODES and rest:
            backend.append((o, head, rest))
        elif head in TRAINCTL_SECTIONS and not rest:
            problems.append(
                Problem(
                    f"'{o.raw}': {head} is a section, not a value.",
                    key=head,
                    hint=f"set one of its keys, e.g. {head}.KEY=VALUE (see `trainctl config show`)",
                )
            )
        elif head in TRAINCTL_SECTIONS:
            maybe_trainctl.append(o)
        else:
            backend.append((o, None, o.key))
    if problems:
        raise ConfigProblems(problems)
    group_overrides += _env_takes_data_and_reward(group_overrides)

    cfg, choices = hydra_compose(search, group_overrides)

    trainctl_overrides: list[Override] = []
    for o in maybe_trainctl:
        problem = moved(o.key, o.value)
        if problem is not None:
            problems.append(problem)
            continue
        # a key trainctl's schema declares is trainctl's; any other (data.train_batch_size) is the backend's
        if not declares(o.key):
            backend.append((o, None, o.key))
            continue
        if o.op == "delete":
            problems.append(
                Problem(f"'{o.raw}': trainctl keys cannot be deleted.", key=o.key, hint=f"set it instead: {o.key}=null")
            )
            continue
        with open_dict(cfg):
            OmegaConf.update(cfg, o.key, o.value, merge=True)
        trainctl_overrides.append(o)

    if OmegaConf.select(cfg, "data.name") == "env" and OmegaConf.select(cfg, "env.kind") not in (None, "none"):
        with open_dict(cfg):  # one folder per setting of the environment: a changed task mix is new rows
            cfg.data.dir = f"{cfg.data.dir}-{env_digest(cfg.env)}"

    family = OmegaConf.select(cfg, "algorithm.family")
    if family not in FAMILY_NODE:
        problems.append(
            Problem(
                f"algorithm.family is {family!r}; it must be one of {', '.join(FAMILY_NODE)}.",
                key="algorithm.family",
                hint="an algorithm file sets family: sft (verl SFT), ppo (verl main_ppo), or a TRL trainer's: "
                + ", ".join(TRAINERS),
            )
        )
        raise ConfigProblems(problems)
    node = FAMILY_NODE[family]

    backend_overrides: list[BackendOverride] = []
    for o, explicit, path in backend:
        if explicit and explicit != node:
            problems.append(
                Problem(
                    f"'{o.raw}' sets a {explicit} key, but algorithm={cfg.algorithm.name} runs on {node}.",
                    key=o.key,
                    hint=f"drop it, or choose an algorithm that runs on {explicit}",
                )
            )
            continue
        backend_overrides.append(BackendOverride(raw=o.raw, path=path, value=o.value, op=o.op))
        if o.op != "delete":
            with open_dict(cfg):
                OmegaConf.update(cfg[node], path, o.value, merge=True, force_add=True)
    if problems:
        raise ConfigProblems(problems)

    return Composition(
        cfg=cfg,
        search=search,
        group_overrides=group_overrides,
        choices=choices,
        trainctl_overrides=trainctl_overrides,
        backend_overrides=backend_overrides,
    )


def resolve_trainctl(comp: Composition) -> tuple[dict, list[Problem]]:
    """The trainctl sections with every interpolation resolved; a value that cannot resolve is a Problem."""
    from omegaconf.errors import OmegaConfBaseException

    from trainctl.config.interpolation import resolve

    sections = [str(s) for s in comp.cfg if s not in BACKEND_NODES]
    raw = OmegaConf.to_container(comp.cfg, resolve=False)
    if all(isinstance(raw[s], dict) for s in sections):
        plain = resolve({s: raw[s] for s in sections}, raw)  # without OmegaConf's parser where it can (~30 ms)
        if plain is not None:
            return plain, []
    try:
        return {s: OmegaConf.to_container(comp.cfg[s], resolve=True) for s in sections}, []
    except OmegaConfBaseException:
        pass  # find every value that fails, one by one
    problems: list[Problem] = []
    return {s: _resolve_tree(comp.cfg, s, problems) for s in sections}, problems


def _resolve_tree(cfg: DictConfig, key: str, problems: list[Problem]) -> Any:
    from omegaconf.errors import OmegaConfBaseException

    node = OmegaConf.select(cfg, key, throw_on_resolution_failure=False)
    if OmegaConf.is_dict(node):
        return {str(k): _resolve_tree(cfg, f"{key}.{k}", problems) for k in node}
    try:
        value = OmegaConf.select(cfg, key, throw_on_missing=True)
    except OmegaConfBaseException as e:
        cause = str(e).splitlines()[0]
        if any(cause in p.message for p in problems):
            return None  # a value that only inherits an error already reported
        raw = OmegaConf.to_container(cfg, resolve=False)
        for part in key.split("."):
            raw = raw.get(part) if isinstance(raw, dict) else raw
        problems.append(
            Problem(
                f"{key} = {raw!r} cannot be resolved: {cause}",
                key=key,
                hint="check the interpolation's key path (`trainctl config show` lists them)",
            )
        )
        return None
    if OmegaConf.is_config(value):
        return OmegaConf.to_container(value, resolve=True)
    return value
