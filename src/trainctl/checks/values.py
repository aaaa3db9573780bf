"""trainctl's own settings beyond their types (those are checked by the schema, trainctl.config.load): a run name
that can name a folder, and data in the format the algorithm reads."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from trainctl import launchers
from trainctl.errors import Problem, TrainctlError

if TYPE_CHECKING:
    from trainctl.config.compose import Composition
    from trainctl.config.schema import Config

_SAFE_NAME = re.compile(r"[\w.\-+=@]+")


def checks(cfg: Config, comp: Composition) -> list[Problem]:
    problems = []
    name = cfg.run.name
    if not _SAFE_NAME.fullmatch(name):
        problems.append(
            Problem(
                f"run.name = {name!r} cannot name a folder (use letters, digits and . _ - + = @).",
                key="run.name",
                hint="run.name=" + re.sub(r"[^\w.\-+=@]+", "-", name).strip("-"),
            )
        )
    try:
        launchers.get(cfg.hardware.launcher)
    except TrainctlError as e:
        problems.append(Problem(e.message, key="hardware.launcher", hint=e.hint))
    if cfg.data.answer_format:
        try:
            re.compile(cfg.data.answer_format)
        except re.error as e:
            problems.append(
                Problem(
                    f"data.answer_format = {cfg.data.answer_format!r} is not a regular expression: {e}.",
                    key="data.answer_format",
                    hint="data.answer_format='#### -?[0-9]+' (Python's re syntax), or null",
                )
            )
    fmt = cfg.algorithm.data_format
    if fmt not in cfg.data.formats and cfg.env.kind != "none":
        problems.append(
            Problem(
                f"env={cfg.env.name} supplies RL prompts and their scoring; algorithm={cfg.algorithm.name} reads "
                f"{fmt} data.",
                key="env",
                hint="a PPO-family algorithm (algorithm=grpo), or env=none with a data option",
            )
        )
    elif fmt not in cfg.data.formats:
        # data=env is the rows of an environment (env=NAME chooses it), not an option to choose by hand
        having = [n for n, f in comp.search.options("data").items() if fmt in data_formats(f) and n != "env"]
        problems.append(
            Problem(
                f"data={cfg.data.name} has no {fmt} format (it has {', '.join(cfg.data.formats)}); "
                f"algorithm={cfg.algorithm.name} reads {fmt} data.",
                key="data",
                hint=f"choose data={' or data='.join(having)}" if having else "prepare your own: trainctl data convert",
            )
        )
    return problems


def data_formats(file) -> list[str]:
    """The formats a data option declares, read without composing it."""
    import yaml

    try:
        return list((yaml.safe_load(file.read_text()) or {}).get("formats") or [])
    except (OSError, yaml.YAMLError):
        return []
