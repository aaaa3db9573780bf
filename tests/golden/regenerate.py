"""The resolved backend config of every algorithm preset, kept as golden files (`make golden` rewrites them).

Each is composed with the same model, data and hardware, with fixed paths, so that a change in a preset, a mapping
or verl's defaults shows up as a reviewable diff in tests/golden/*.yaml.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
HOME = "/trainctl-home"


def golden_args(algorithm: str) -> list[str]:
    data = "hh-rlhf" if algorithm in ("dpo", "rm", "kto", "orpo", "simpo") else "gsm8k"  # TRL's read pairs
    return [
        f"algorithm={algorithm}",
        "model=qwen2.5-7b",
        f"data={data}",
        "hardware=8gpu",
        "logger=console",
        f"run.dir=/trainctl-runs/{algorithm}",
        # on-policy distillation's teacher: a larger model with the student's tokenizer
        *(["distillation.teacher=qwen2.5-14b"] if algorithm == "distill" else []),
    ]


def render(algorithm: str) -> str:
    from trainctl.plan import make_plan

    with mock.patch.dict(os.environ, {"TRAINCTL_HOME": HOME}):
        plan = make_plan(golden_args(algorithm), native=False)
        text = plan.backend_yaml()
    return f"# TRAINCTL_HOME={HOME} trainctl config show --backend {' '.join(golden_args(algorithm))}\n" + text


def algorithms() -> list[str]:
    from trainctl.config.search import SearchPath

    return list(SearchPath.default().options("algorithm"))


def main() -> int:
    for algorithm in algorithms():
        path = HERE / f"{algorithm}.yaml"
        path.write_text(render(algorithm))
        print(f"wrote {path.relative_to(HERE.parent.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
