"""Where each value of a composed config came from: a group file, a recipe, or the command line."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

if TYPE_CHECKING:
    from trainctl.config.compose import Composition

COMMAND_LINE = "command line"


def _leaves(tree: Any, prefix: str) -> list[str]:
    if isinstance(tree, dict) and tree:
        out = []
        for k, v in tree.items():
            out.extend(_leaves(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return [prefix] if prefix else []


def sources(comp: Composition) -> list[tuple[str, set[str]]]:
    """(label, keys it sets) for every config file Hydra merged, in merge order, then the command line."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    from trainctl.config.compose import PRIMARY, _hydra

    try:
        hydra = _hydra(comp.search)
        defaults = hydra.config_loader.compute_defaults_list(PRIMARY, comp.group_overrides, RunMode.RUN).defaults
    finally:
        GlobalHydra.instance().clear()
    out: list[tuple[str, set[str]]] = []
    for d in defaults:
        if d.config_path is None or d.config_path.startswith("hydra/") or d.config_path == "hydra/config":
            continue
        file = comp.search.find(d.config_path)
        if file is None:
            continue
        raw = OmegaConf.to_container(OmegaConf.load(file), resolve=False) or {}
        raw.pop("defaults", None)
        out.append((comp.search.label(file), set(_leaves(raw, d.package or ""))))
    cli = {o.key for o in comp.trainctl_overrides}
    cli |= {f"{comp.node}.{b.path}" for b in comp.backend_overrides}
    out.append((COMMAND_LINE, cli))
    return out


def origin_of(path: str, srcs: list[tuple[str, set[str]]]) -> str | None:
    """The last source that set `path` (or a key under it)."""
    for label, keys in reversed(srcs):
        if path in keys or any(k.startswith(path + ".") for k in keys):
            return label
    return None
