"""`load(overrides)`: the trainctl config, composed, resolved and checked against its schema.

This is what every layer that needs a setting calls (data, models, jobs, the plan): it composes trainctl's groups
with Hydra, resolves trainctl's own sections and checks each value against trainctl.config.schema. It never
translates into a backend config and imports no backend: a data or model command pays for composition only.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from trainctl.config.compose import Composition, compose, resolve_trainctl
from trainctl.config.origins import COMMAND_LINE
from trainctl.config.overrides import Override, parse, render_value
from trainctl.config.schema import BACKEND_NODES, MOVED, SECTIONS, Config, from_dict, moved, section_class
from trainctl.config.search import SearchPath
from trainctl.config.types import ClassSchema, Issue, check_tree, example, gather, qualname, schemas_of
from trainctl.errors import ConfigProblems, Problem
from trainctl.suggest import closest


@dataclass
class Loaded:
    """A checked trainctl config (typed) and the composition it came from (files, choices, overrides)."""

    cfg: Config
    comp: Composition


@lru_cache(maxsize=1)
def trainctl_schemas() -> tuple[ClassSchema, dict[str, ClassSchema]]:
    schemas = schemas_of(Config)
    return schemas[f"{Config.__module__}.{Config.__qualname__}"], schemas


def load(overrides: list[str] | list[Override], search: SearchPath | None = None) -> Loaded:
    """Compose, resolve and check trainctl's sections; raises ConfigProblems naming every bad key."""
    search = search or SearchPath.default()
    parsed = [o if isinstance(o, Override) else None for o in overrides]
    if any(p is None for p in parsed):
        parsed = parse([str(o) for o in overrides], search)
    comp = compose(parsed, search)
    data, problems = resolve_trainctl(comp)
    data = {k: gather(section_class(k), v) if k in SECTIONS else v for k, v in data.items()}
    if not problems:
        problems = check_sections(data, comp)
    if problems:
        raise ConfigProblems(problems)
    backend = {node: comp.cfg.get(node) for node in BACKEND_NODES}
    return Loaded(cfg=from_dict(Config, {**data, **{k: {} for k in backend}}), comp=comp)


def load_option(group: str, name: str, search: SearchPath | None = None) -> Any | None:
    """The section one option of a group composes to, typed: `load_option("model", "tiny-rm", search)` is that
    option's Model. It is looked up where a composition looks, the user's config folders (each --config-dir, then
    ./conf) before the built-in ones: pass the composition's own search path (`comp.search`). None when no folder
    has the option; ConfigProblems naming the file when it does not load."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    search = search or SearchPath.default()
    if group not in SECTIONS:
        raise ValueError(f"{group} is not a group with a section of its own")
    if name not in search.options(group):
        return None
    comp = compose(parse([f"{group}={name}"], search), search)
    try:  # only this section: resolving the whole config costs several times more
        data = OmegaConf.to_container(comp.cfg[group], resolve=True)
    except OmegaConfBaseException:
        return getattr(load([f"{group}={name}"], search).cfg, group)  # it names the value that does not resolve
    cls = section_class(group)
    data = gather(cls, data)
    _, schemas = trainctl_schemas()
    issues = check_tree(data, schemas[qualname(cls)], schemas, path=group, required=True)
    if issues:
        raise ConfigProblems([issue_problem(i, comp, schemas) for i in issues])
    return from_dict(cls, data)


def check_sections(data: dict, comp: Composition) -> list[Problem]:
    """trainctl's sections against the schema: unknown keys, types, ranges, required keys."""
    root, schemas = trainctl_schemas()
    tree = {k: v for k, v in data.items() if k not in BACKEND_NODES}
    return [issue_problem(i, comp, schemas) for i in check_tree(tree, root, schemas, required=True)]


def issue_problem(issue: Issue, comp: Composition | None, schemas: dict[str, ClassSchema]) -> Problem:
    """A schema issue in trainctl's own sections, as a Problem that names the key, the file and the fix."""
    key = issue.path
    origin = comp.origin(key) if comp is not None else None
    where = f" (set in {origin})" if origin and origin != COMMAND_LINE else ""
    section = key.split(".")[0]
    if issue.kind == "unknown" and key in MOVED:
        return moved(key, issue.value, origin if origin != COMMAND_LINE else None)
    if issue.kind == "unknown":
        guess = closest(key.rsplit(".", 1)[-1], issue.known)
        parent = key.rpartition(".")[0]
        return Problem(
            f"unknown config key '{key}'{where}.",
            key=key,
            details=[f"Did you mean '{parent}.{guess[0]}'?"] if guess else [f"Known: {', '.join(issue.known)}"],
            hint=f"fix or remove it in {origin}" if where else f"`trainctl config show` lists the {section}.* keys",
        )
    if issue.kind == "missing":
        return Problem(
            f"{key} is missing from the composed config (it must be {issue.expected}).",
            key=key,
            hint=f"a {section} option must set it (see conf/{section}/)",
        )
    info = schemas[issue.owner].fields[key.rsplit(".", 1)[-1]]
    fix = _fix(key, issue.value, info)
    if issue.kind == "range":
        return Problem(
            f"{key} = {_show(issue.value)} is out of range: it must be {_range_words(issue.expected)}{where}.",
            key=key,
            hint=fix,
        )
    if issue.expected.startswith("one of"):
        return Problem(f"{key} = {issue.value!r} is not {issue.expected}{where}.", key=key, hint=fix)
    return Problem(f"{key} must be {issue.expected}, not {issue.value!r}{where}.", key=key, hint=fix)


def _range_words(expected: str) -> str:
    return expected.replace("in (", "in the range (").replace("in [", "in the range [")


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else render_value(value)


def _fix(key: str, value: Any, info) -> str:
    from trainctl.config.types import Spec

    choices: tuple = info.range.choices if info.range is not None else ()
    spec: Spec = info.spec
    if not choices:
        members = spec.of if spec.kind == "union" else (spec,)
        choices = tuple(v for s in members if s.kind == "literal" for v in s.values)
    if choices and isinstance(value, str):
        guess = closest(value, [str(c) for c in choices], cutoff=0.4)
        if guess:
            return f"{key}={guess[0]}"
    return f"{key}={render_value(example(info))}"
