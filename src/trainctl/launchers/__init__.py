"""Launchers: how a run's trainer starts, is followed, reports its status, and is stopped.

`hardware.launcher` names one. trainctl ships four, one module each:
  local        this machine: the trainer is a child of trainctl, supervised (trainctl.launchers.local)
  ray_cluster  the same local supervision; the trainer joins a running Ray cluster (trainctl.launchers.ray_cluster)
  ray_job      the trainer runs as a job submitted to a cluster's Jobs API (trainctl.launchers.ray_job)
  slurm        the run is a Slurm batch job, its script in the run folder (trainctl.launchers.slurm)

A new launcher (Kubernetes, ...) is one module with a Launcher subclass decorated with @register("name"). A
package of the user's adds one through the entry point group `trainctl.launchers`, naming the module that registers
it (or the class), as reward kinds are added (trainctl.backends.rewards.registry):

    [project.entry-points."trainctl.launchers"]
    slurm = "my_cluster.slurm"

It is imported when a config first names it (hardware.launcher=slurm). Everything else asks the registry: the
backends (how the trainer reaches Ray), the checks (the address), the run (start, follow), `runs ls` (status),
`runs stop`, `jobs` and the server.
"""

from __future__ import annotations

import importlib

from trainctl.errors import TrainctlError
from trainctl.launchers.base import Launcher

__all__ = ["Launcher", "get", "names", "register"]

ENTRY_POINT_GROUP = "trainctl.launchers"
# the shipped launchers, imported on first lookup (their modules import nothing heavy at the top)
BUILTIN = {
    "local": "trainctl.launchers.local",
    "ray_cluster": "trainctl.launchers.ray_cluster",
    "ray_job": "trainctl.launchers.ray_job",
    "slurm": "trainctl.launchers.slurm",
}
_REGISTRY: dict[str, type[Launcher]] = {}


def register(name: str):
    """Class decorator: `@register("slurm") class Slurm(Launcher): ...` makes hardware.launcher=slurm work."""

    def add(cls: type[Launcher]) -> type[Launcher]:
        if not (isinstance(cls, type) and issubclass(cls, Launcher)):
            raise TypeError(f"@register({name!r}) decorates {cls!r}, not a subclass of Launcher")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return add


def _entry_points() -> dict:
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def _load_entry_point(ep) -> None:
    where = f"the entry point {ep.name} = {ep.value} (group {ENTRY_POINT_GROUP})"
    try:
        loaded = ep.load()
    except Exception as e:  # a broken plugin: say which, and why
        raise TrainctlError(
            f"launcher {ep.name!r} does not import: {type(e).__name__}: {e}",
            details=[f"from {where}"],
            hint=f"fix the package, or uninstall it: pip uninstall {ep.dist.name}"
            if getattr(ep, "dist", None)
            else "fix the module it names",
        ) from None
    if isinstance(loaded, type) and issubclass(loaded, Launcher) and ep.name not in _REGISTRY:
        register(ep.name)(loaded)
    if ep.name not in _REGISTRY:
        raise TrainctlError(
            f"launcher {ep.name!r}: {where} registers no launcher of that name.",
            hint=f'decorate its class with @register("{ep.name}") (trainctl.launchers.register)',
        )


def names() -> list[str]:
    """Every launcher name: the shipped ones first, then those registered or installed."""
    extra = sorted((set(_REGISTRY) | set(_entry_points())) - set(BUILTIN))
    return [*BUILTIN, *extra]


def get(name: str) -> Launcher:
    """The launcher of this name; an unknown name is an error with the closest one."""
    if name in BUILTIN and name not in _REGISTRY:
        importlib.import_module(BUILTIN[name])
    if name not in _REGISTRY:
        ep = _entry_points().get(name)
        if ep is not None:
            _load_entry_point(ep)
    if name not in _REGISTRY:
        from trainctl.suggest import closest

        known = names()
        guess = closest(name, known)
        raise TrainctlError(
            f"hardware.launcher = {name!r} is not one of: {', '.join(known)}.",
            hint=f"hardware.launcher={guess[0]}"
            if guess
            else f"a package adds a launcher through the entry point group {ENTRY_POINT_GROUP}",
        )
    return _REGISTRY[name]()
