"""The model and data a run reads: an error before a real launch, a warning on --dry-run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from trainctl.errors import Problem

if TYPE_CHECKING:
    from trainctl.plan import Plan


def model_present(path: str | Path) -> bool:
    return (Path(path).expanduser() / "config.json").is_file()


def model_fix(model: dict) -> str:
    if model["name"] == "tiny":
        return "trainctl model init tiny"
    return f"trainctl model pull {model['name']}"


def checks(plan: Plan) -> list[Problem]:
    severity = "error" if plan.launching else "warning"
    problems = []
    model = plan.tc["model"]
    if not model_present(model["path"]):
        problems.append(
            Problem(
                f"model={model['name']} is not at {model['path']} (no config.json there).",
                key="model.path",
                hint=f"run: {model_fix(model)}   (or point model.path at a local Hugging Face model folder)",
                severity=severity,
            )
        )
    data = plan.tc["data"]
    for split, key in (("train", "train_files"), ("val", "val_files")):
        f = data.get(key)
        if f and not Path(f).expanduser().is_file():
            problems.append(
                Problem(
                    f"data={data['name']} has no {split} file at {f}.",
                    key=f"data.{key}",
                    hint=f"run: trainctl data prep {data['name']}",
                    severity=severity,
                )
            )
    return problems
