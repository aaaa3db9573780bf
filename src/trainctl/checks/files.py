"""The model and data a run reads: an error before a real launch, a warning on --dry-run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from trainctl.errors import Problem
from trainctl.models.tiny import fetch_command

if TYPE_CHECKING:
    from trainctl.checks.base import Subject


def model_present(path: str | Path) -> bool:
    return (Path(path).expanduser() / "config.json").is_file()


def checks(s: Subject) -> list[Problem]:
    severity = "error" if s.launching else "warning"
    problems = []
    model = s.cfg.model
    if not model_present(model.path):
        problems.append(
            Problem(
                f"model={model.name} is not at {model.path} (no config.json there).",
                key="model.path",
                hint=f"run: {fetch_command(model.name)}   (or point model.path at a local Hugging Face model folder)",
                severity=severity,
            )
        )
    data = s.cfg.data
    for split, key in (("train", "train_files"), ("val", "val_files")):
        f = getattr(data, key)
        if f and not Path(f).expanduser().is_file():
            problems.append(
                Problem(
                    f"data={data.name} has no {split} file at {f}.",
                    key=f"data.{key}",
                    hint=f"run: trainctl data prep {data.name}",
                    severity=severity,
                )
            )
    return problems
