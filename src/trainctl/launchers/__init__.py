"""Launchers: how a run's trainer starts, is followed, reports its status, and is stopped.

`hardware.launcher` names one. trainctl ships three, one module each:
  local        this machine: the trainer is a child of trainctl, supervised (trainctl.launchers.local)
  ray_cluster  the same local supervision; the trainer joins a running Ray cluster (trainctl.launchers.ray_cluster)
  ray_job      the trainer runs as a job submitted to a cluster's Jobs API (trainctl.launchers.ray_job)

A new launcher (Slurm, Kubernetes, ...) is one module with a Launcher subclass decorated with @register("name"),
loaded as a plugin (trainctl.plugins: an entry point in `trainctl.plugins`, or TRAINCTL_PLUGINS=module).
Everything else asks the registry: the backends (how the trainer reaches Ray), the checks (the address), the run
(start, follow), `runs ls` (status), `runs stop`, `jobs` and the server.
"""

from __future__ import annotations

import importlib

from trainctl.errors import TrainctlError
from trainctl.launchers.base import Launcher

__all__ = ["Launcher", "get", "names", "register"]

# the shipped launchers, imported on first lookup (their modules import nothing heavy at the top)
BUILTIN = {
    "local": "trainctl.launchers.local",
    "ray_cluster": "trainctl.launchers.ray_cluster",
    "ray_job": "trainctl.launchers.ray_job",
}
_REGISTRY: dict[str, type[Launcher]] = {}


def register(name: str):
    """Class decorator: `@register("slurm") class Slurm(Launcher): ...` makes hardware.launcher=slurm work."""

    def add(cls: type[Launcher]) -> type[Launcher]:
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return add


def _load_all() -> None:
    from trainctl.plugins import load_plugins

    for name, module in BUILTIN.items():
        if name not in _REGISTRY:
            importlib.import_module(module)
    load_plugins()


def names() -> list[str]:
    """Every launcher name, the shipped ones first."""
    _load_all()
    return [*BUILTIN, *sorted(set(_REGISTRY) - set(BUILTIN))]


def get(name: str) -> Launcher:
    """The launcher of this name; an unknown name is an error with the closest one."""
    if name in BUILTIN and name not in _REGISTRY:
        importlib.import_module(BUILTIN[name])
    if name not in _REGISTRY:
        _load_all()
    if name not in _REGISTRY:
        from trainctl.suggest import closest

        guess = closest(name, _REGISTRY)
        raise TrainctlError(
            f"hardware.launcher = {name!r} is not one of: {', '.join(names())}.",
            hint=f"hardware.launcher={guess[0]}" if guess else "trainctl config keys hardware lists the launchers",
        )
    return _REGISTRY[name]()
