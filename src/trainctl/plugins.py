"""Extensions from outside the package: modules that register reward kinds, launchers, ... when imported.

Two ways in, both read once per process, before a registry answers its first lookup:
  - an installed package's entry points in the group `trainctl.plugins` (each names a module);
  - TRAINCTL_PLUGINS=pkg.mod,other.mod, for a module on the path that is not packaged (a project's own code).
A module that cannot be imported is an error naming it (a plugin silently missing would change what a run does).
"""

from __future__ import annotations

import importlib
import os
from functools import cache

from trainctl.errors import TrainctlError

GROUP = "trainctl.plugins"
ENV = "TRAINCTL_PLUGINS"


def _named() -> list[tuple[str, str]]:
    """(module, where it was named) for every plugin."""
    from importlib.metadata import entry_points

    out = [(ep.value.split(":")[0], f"entry point {ep.name!r} of {GROUP}") for ep in entry_points(group=GROUP)]
    out += [(m.strip(), ENV) for m in os.environ.get(ENV, "").split(",") if m.strip()]
    return out


@cache
def _load(modules: tuple[tuple[str, str], ...]) -> None:
    for module, where in modules:
        try:
            importlib.import_module(module)
        except Exception as e:
            raise TrainctlError(
                f"the trainctl plugin {module} ({where}) cannot be imported: {type(e).__name__}: {e}",
                hint=f"fix the module, or remove it from {where}",
            ) from e


def load_plugins() -> None:
    """Import every plugin module (once per process and set of plugins)."""
    _load(tuple(_named()))
