"""Reward kinds by name: `@register("name")` fills the registry when a kind's module is imported; `lookup(name)`
finds one, or says which name was meant.

trainctl's own kinds are the modules in BUILTIN, imported on the first lookup. A package of the user's adds a kind
through the entry point group `trainctl.reward_kinds`, naming the module that registers it (or the class):

    [project.entry-points."trainctl.reward_kinds"]
    length = "my_rewards.length"

It is imported when a config first names the kind (`reward.kind: length` in the user's conf/reward/length.yaml), or
when every kind is listed (`trainctl config keys reward`, a did-you-mean).
"""

from __future__ import annotations

import dataclasses
import importlib
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING

from trainctl.backends.rewards.base import RewardKind, setting_names
from trainctl.errors import ConfigProblems, Problem
from trainctl.facts.verl import REWARD_NODE_KEYS

if TYPE_CHECKING:
    from trainctl.config.schema import Config

ENTRY_POINT_GROUP = "trainctl.reward_kinds"
# trainctl's own kinds: trainctl.backends.rewards.<name>, each registering the kind of its name
BUILTIN = ("rule", "fn", "model", "judge")

KINDS: dict[str, RewardKind] = {}


def register(name: str) -> Callable[[type[RewardKind]], type[RewardKind]]:
    """Class decorator: the kind `reward.kind=name` chooses. Its settings are checked here, once, so that a kind
    whose settings could never be written (a nested section, a name verl's own `reward` node has) fails at import."""

    def add(cls: type[RewardKind]) -> type[RewardKind]:
        if not (isinstance(cls, type) and issubclass(cls, RewardKind)):
            raise TypeError(f"@register({name!r}) decorates {cls!r}, not a subclass of RewardKind")
        known = KINDS.get(name)
        if known is not None and type(known).__qualname__ != cls.__qualname__:
            raise ValueError(f"reward kind {name!r} is registered twice: {type(known).__module__} and {cls.__module__}")
        _check_settings(name, cls.Settings)
        cls.name = name
        KINDS[name] = cls()
        return cls

    return add


def _check_settings(name: str, settings: type) -> None:
    if not dataclasses.is_dataclass(settings):
        raise TypeError(f"reward kind {name!r}: Settings must be a dataclass, not {settings!r}")
    hints = typing.get_type_hints(settings)
    for f in dataclasses.fields(settings):
        if f.name in REWARD_NODE_KEYS or f.name in ("name", "kind", "settings"):
            raise ValueError(f"reward kind {name!r}: a setting may not be named {f.name!r} (reward.{f.name} is taken)")
        nested = [a for a in (hints[f.name], *typing.get_args(hints[f.name])) if dataclasses.is_dataclass(a)]
        if nested:
            raise TypeError(f"reward kind {name!r}: reward.{f.name} is a section; a setting is a plain value")


def _builtin() -> None:
    for module in BUILTIN:
        importlib.import_module(f"trainctl.backends.rewards.{module}")


def _registered() -> list[str]:
    """The names registered in this process, trainctl's own first (in BUILTIN's order)."""
    _builtin()
    return [*(n for n in BUILTIN if n in KINDS), *(n for n in KINDS if n not in BUILTIN)]


def _entry_points() -> dict:
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def _load_entry_point(ep) -> RewardKind:
    """The kind an entry point names: its module registers it on import, or it names the class."""
    where = f"the entry point {ep.name} = {ep.value} (group {ENTRY_POINT_GROUP}"
    where += f", package {ep.dist.name})" if getattr(ep, "dist", None) else ")"
    try:
        loaded = ep.load()
    except Exception as e:  # a broken plugin: say which, and why
        raise ConfigProblems(
            [
                Problem(
                    f"reward kind {ep.name!r} does not import: {type(e).__name__}: {e}",
                    key="reward.kind",
                    details=[f"from {where}"],
                    hint=f"fix the package, or uninstall it: pip uninstall {ep.dist.name}"
                    if getattr(ep, "dist", None)
                    else "fix the module it names",
                )
            ]
        ) from None
    if isinstance(loaded, type) and issubclass(loaded, RewardKind) and ep.name not in KINDS:
        register(ep.name)(loaded)
    if ep.name not in KINDS:
        raise ConfigProblems(
            [
                Problem(
                    f"reward kind {ep.name!r}: {where} registers no kind of that name.",
                    key="reward.kind",
                    hint=f'decorate its class with @register("{ep.name}") (trainctl.backends.rewards.register)',
                )
            ]
        )
    return KINDS[ep.name]


def find(name: str) -> RewardKind | None:
    """The kind of this name: trainctl's own, one registered already, or an installed package's; None if none."""
    _builtin()
    if name in KINDS:
        return KINDS[name]
    ep = _entry_points().get(name)
    return _load_entry_point(ep) if ep is not None else None


def names() -> list[str]:
    """Every kind's name, trainctl's own first, then those registered or installed (installed packages' kinds are
    not imported)."""
    registered = _registered()
    return [*registered, *(n for n in _entry_points() if n not in KINDS)]


def kinds() -> list[RewardKind]:
    """Every kind, installed packages' imported."""
    return [k for k in (find(n) for n in names()) if k is not None]


def unknown(name: str) -> Problem:
    """The problem of a reward.kind no kind has, with the name that was likely meant."""
    from trainctl.suggest import closest

    known = names()
    guess = closest(name, known, cutoff=0.5)
    return Problem(
        f"unknown reward kind {name!r}.",
        key="reward.kind",
        details=[f"Did you mean '{guess[0]}'?"] if guess else [],
        hint=f"reward.kind is one of {', '.join(known)} (a package adds its own through the entry point group "
        f"{ENTRY_POINT_GROUP})",
    )


def lookup(name: str) -> RewardKind:
    """The kind of this name; ConfigProblems with a did-you-mean when there is none."""
    found = find(name)
    if found is None:
        raise ConfigProblems([unknown(name)])
    return found


def kind_of(cfg: Config) -> RewardKind:
    """The kind a config's reward section chooses."""
    return lookup(cfg.reward.kind)


def setting_keys() -> list[tuple[str, str, str]]:
    """(reward.KEY, type and range in words, "kind: meaning") of every kind's settings, kind by kind."""
    from trainctl.config.schema import class_keys

    rows = []
    for kind in kinds():
        for key, spec, doc in class_keys(kind.Settings, "reward"):
            rows.append((key, spec, f"{kind.name}: {doc}"))
    return rows


def readers(key: str) -> list[RewardKind]:
    """The kinds that read a setting (trainctl's own first; an installed package's only when none of those does)."""
    found = [KINDS[n] for n in _registered() if key in setting_names(KINDS[n].Settings)]
    return found or [k for k in kinds() if key in setting_names(k.Settings)]
