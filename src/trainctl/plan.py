"""A plan: what `trainctl train` would run, with every problem found before anything starts.

make_plan() composes the trainctl config, translates it into the backend's config, and runs the checks:
fast ones first (no verl import: an answer within a second), then the backend's own validation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from trainctl.backends import backend_for
from trainctl.backends.base import Backend, BuiltConfig, Command, Number, get
from trainctl.checks import data, dpo, environment, files, memory, ppo, sft
from trainctl.checks.values import check_values
from trainctl.config.compose import Composition, compose, resolve_trainctl
from trainctl.config.overrides import parse
from trainctl.config.search import SearchPath
from trainctl.errors import ConfigProblems, Problem

_FAMILY_CHECKS = {"ppo": ppo, "sft": sft, "dpo": dpo}


@dataclass
class Plan:
    comp: Composition
    tc: dict  # the trainctl config, resolved (without the backend nodes)
    backend: Backend
    built: BuiltConfig | None = None
    launching: bool = False
    problems: list[Problem] = field(default_factory=list)
    numbers: list[Number] = field(default_factory=list)

    @property
    def cfg(self) -> DictConfig:
        assert self.built is not None
        return self.built.cfg

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.is_error]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if not p.is_error]

    def value(self, path: str, default: Any = None) -> Any:
        """A backend config value, resolved."""
        return get(self.cfg, path, default)

    @cached_property
    def _rows(self) -> dict[str, int | None]:
        out: dict[str, int | None] = {}
        for split, key in (("train", "train_files"), ("val", "val_files")):
            out[split] = parquet_rows(self.tc["data"].get(key))
        return out

    def rows(self, split: str) -> int | None:
        """Rows in the train or val file, when it exists (read from the parquet footer, not the data)."""
        return self._rows[split]

    @property
    def run_dir(self) -> Path:
        return Path(self.tc["run"]["dir"]).expanduser().resolve()

    def command(self) -> Command:
        return self.backend.command(self)

    def backend_yaml(self) -> str:
        return OmegaConf.to_yaml(self.cfg, resolve=True)

    def trainctl_tree(self) -> dict:
        """The trainctl config in reading order: the groups, the run, then this backend's keys."""
        tree = OmegaConf.to_container(self.comp.cfg, resolve=True)
        order = ["algorithm", "model", "data", "hardware", "logger", "run", "paths", self.backend.node]
        return {k: tree[k] for k in order if k in tree}

    def trainctl_yaml(self) -> str:
        return OmegaConf.to_yaml(OmegaConf.create(self.trainctl_tree()))

    def raise_for_errors(self) -> None:
        if self.errors:
            raise ConfigProblems(self.errors, self.warnings)


def parquet_rows(path: str | None) -> int | None:
    if not path or not Path(path).expanduser().is_file():
        return None
    import pyarrow.parquet as pq

    try:
        return pq.read_metadata(Path(path).expanduser()).num_rows
    except Exception:
        return None


def resolve(overrides: list[str], search: SearchPath | None = None, launching: bool = False) -> Plan:
    """Compose and translate, checking only that every key and value exists (no training checks)."""
    search = search or SearchPath.default()
    comp = compose(parse(overrides, search), search)
    tc, problems = resolve_trainctl(comp)
    if not problems:
        problems += check_values(tc, comp)
    plan = Plan(comp=comp, tc=tc, backend=backend_for(comp.family), launching=launching, problems=problems)
    plan.raise_for_errors()
    plan.built = plan.backend.build(comp, tc, plan.problems)
    return plan


def make_plan(
    overrides: list[str],
    search: SearchPath | None = None,
    launching: bool = False,
    native: bool = True,
) -> Plan:
    """Compose, translate and check. Raises ConfigProblems listing every error found (warnings ride along)."""
    plan = resolve(overrides, search, launching)
    family = _FAMILY_CHECKS[plan.comp.family]
    plan.problems += family.checks(plan)
    plan.problems += files.checks(plan)
    plan.problems += data.checks(plan)
    plan.problems += environment.checks(plan)
    plan.problems += memory.checks(plan)
    plan.raise_for_errors()
    plan.numbers = family.numbers(plan)
    if native:
        from trainctl.checks.native import validate

        # a --dry-run or `config validate` always asks the backend; a launch reuses an earlier verdict on this config
        plan.problems += validate(plan, use_cache=launching)
        plan.raise_for_errors()
    return plan
