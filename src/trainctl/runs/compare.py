"""Putting runs side by side: the config keys whose values differ, and their metrics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainctl.runs.keys import key_metrics
from trainctl.runs.status import RunInfo

MISSING = "-"


def run_config(run: RunInfo) -> dict[str, Any]:
    """A run's whole config as flat keys: trainctl's sections as they are (run.seed, model.name) and the backend's
    keys with its node in front (verl.actor_rollout_ref.actor.optim.lr, trl.beta), as the command line writes them."""
    import yaml

    from trainctl.backends.base import flatten

    flat: dict[str, Any] = {}
    tc_file = run.path / "trainctl.yaml"
    if tc_file.is_file():
        tree = yaml.safe_load(tc_file.read_text()) or {}
        for section in ("verl", "trl"):
            tree.pop(section, None)  # what was set there is in the backend's file, below
        flat.update(flatten(tree))
    config_file = run.raw.get("config_file")
    if config_file and (run.path / config_file).is_file():
        node = "trl" if str(run.backend).startswith("trl") else "verl"
        backend = yaml.safe_load((run.path / config_file).read_text()) or {}
        flat.update({f"{node}.{k}": v for k, v in flatten(backend)})
    return flat


def _names_the_run(value: Any, run: RunInfo, config: dict[str, Any]) -> bool:
    """A value that differs only because the runs have different names (run.dir, checkpoint paths, wandb names)."""
    if not isinstance(value, str):
        return False
    if value == run.name:
        return True
    folder = str(run.path.resolve())
    run_dir = str(config.get("run.dir", ""))
    return folder in value or (bool(run_dir) and (value == run_dir or value.startswith(run_dir + "/")))


@dataclass
class Comparison:
    runs: list[RunInfo]
    differ: dict[str, list[Any]] = field(default_factory=dict)  # key -> value per run (MISSING where absent)
    by_name: list[str] = field(default_factory=list)  # keys that differ only as the runs' names do
    same: int = 0  # keys equal in every run
    metrics: dict[str, list[Any]] = field(default_factory=dict)  # metric -> last value per run


def compare(runs: list[RunInfo], extra_metrics: list[str] | None = None) -> Comparison:
    from trainctl.metrics import read_metrics

    configs = [run_config(r) for r in runs]
    out = Comparison(runs)
    for key in sorted(set().union(*configs)):
        values = [c.get(key, MISSING) for c in configs]
        if all(_same(values[0], v) for v in values[1:]):
            out.same += 1
        elif all(_names_the_run(v, r, c) for v, r, c in zip(values, runs, configs, strict=True)):
            out.by_name.append(key)
        else:
            out.differ[key] = values
    series = [read_metrics(r.path) for r in runs]
    names: list[str] = []
    for r, metrics in zip(runs, series, strict=True):
        present = {k for m in metrics.values() for k in m}
        names += [n for km in key_metrics(r.family, present) if (n := km.pick(present)) and n not in names]
    names += [m for m in extra_metrics or [] if m not in names]
    for name in names:
        out.metrics[name] = [_last(metrics, name) for metrics in series]
    return out


def _same(a: Any, b: Any) -> bool:
    return (type(a) is type(b) and a == b) or (isinstance(a, int | float) and isinstance(b, int | float) and a == b)


def _last(metrics: dict[int, dict], name: str) -> Any:
    values = [m[name] for m in metrics.values() if name in m]
    return values[-1] if values else MISSING
