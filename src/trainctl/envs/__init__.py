"""Packaged environments (env=NAME, issue 55): each supplies an RL run's prompts and their scoring, in place of a data
and a reward option. A kind is one module here with the same four functions, registered in KINDS:

  problems(env)              what is wrong with the env section's settings (before anything is generated)
  rows(env, split)           the split's RL rows (verl's columns; the row's task and scorer input in extra_info)
  tasks()                    the names the kind offers (`trainctl env ls`)
  describe(task, n, seed)    a task's settings and n generated examples, scored (`trainctl env show`)

and optionally current(env, folder) (whether rows written earlier still hold) and status() (`trainctl env ls`'s line).

prepare() writes a config's rows into data.dir (a folder per setting of the environment: trainctl.config.compose),
all or none, once: the next plan with the same settings finds them there; with them, the environment's settings (SPEC),
from which a run's curriculum (trainctl.runtime.curriculum) generates its tasks at their next levels.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

from omegaconf import OmegaConf

from trainctl.errors import ConfigProblems, Problem

# kind -> the module that implements it
KINDS = {"reasoning_gym": "trainctl.envs.reasoning_gym", "verifiers": "trainctl.envs.verifiers"}
SPLITS = {"train": "train_files", "test": "val_files"}
# the environment's settings, written beside its train rows (trainctl.runtime.curriculum reads them in the trainer)
SPEC = "env.json"


def kind_module(kind: str) -> ModuleType:
    return importlib.import_module(KINDS[kind])


def prepared(cfg: Any) -> bool:
    """Whether the environment's rows are where data=env reads them (and, for a kind that can tell, still hold)."""
    if not all(Path(getattr(cfg.data, key)).is_file() for key in SPLITS.values()):
        return False
    current = getattr(kind_module(cfg.env.kind), "current", None) if cfg.env.kind in KINDS else None
    return current is None or current(cfg.env, Path(cfg.data.dir))


def tool_problems(cfg: Any) -> list[Problem]:
    """An environment whose tasks come with tools (a verifiers taskset's toolsets) and the run's tools option: each
    needs the other (trainctl.envs.verifiers.tool_problems)."""
    from trainctl.envs import verifiers

    written = cfg.env.kind == "verifiers" and cfg.data.name == "env" and prepared(cfg)
    return verifiers.tool_problems(cfg.env, cfg.tools, Path(cfg.data.dir) if written else None)


def prepare(cfg: Any) -> Path | None:
    """Write the environment's train and held-out rows into data.dir unless they are there (None: no environment,
    or nothing to write). Raises ConfigProblems for settings the kind refuses, before anything is written."""
    env = cfg.env
    if env.kind == "none" or cfg.data.name != "env" or prepared(cfg):
        return None
    from trainctl.data.writer import write_rows

    if env.kind not in KINDS:
        raise ConfigProblems(
            [
                Problem(
                    f"env.kind = {env.kind!r}: trainctl knows no such environment kind.",
                    key="env.kind",
                    hint=f"env.kind: {' or '.join(KINDS)}   (trainctl env ls)",
                )
            ]
        )

    kind = kind_module(env.kind)
    problems = kind.problems(env)
    if problems:
        raise ConfigProblems(problems)
    folder = Path(cfg.data.dir)
    staging = folder.parent / f".{folder.name}.partial-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        for split, key in SPLITS.items():
            target = staging / Path(getattr(cfg.data, key)).relative_to(folder)
            target.parent.mkdir(parents=True, exist_ok=True)
            write_rows(target, kind.rows(env, split))
        # the settings the rows came from, beside them: a run's curriculum generates its tasks' next levels from them
        spec = staging / Path(cfg.data.train_files).relative_to(folder).parent / SPEC
        settings = OmegaConf.to_container(env, resolve=True) if OmegaConf.is_config(env) else dataclasses.asdict(env)
        spec.write_text(json.dumps(settings, indent=1, default=str))
        if folder.exists():  # an earlier, interrupted write: what is there is not whole
            shutil.rmtree(folder)
        os.replace(staging, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder
