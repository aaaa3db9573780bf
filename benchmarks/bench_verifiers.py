"""Issue 55: env=verifiers scores in verifiers' own interpreter (trainctl.runtime.rewards.verifiers): what its worker's
start costs (verifiers' import and the taskset's load: once per scoring process) and what each response's round-trip
costs after it, on the test taskset tests/envs/fixtures/verifiers/vf_arith.py. Needs verifiers' interpreter
(`trainctl env install verifiers`, or .venv-verifiers from `make install`; TRAINCTL_VERIFIERS_VENV names another).
Medians of BENCH_REPS starts (default 3) and of 50 round-trips each."""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

from common import Row, report, reps

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "envs" / "fixtures" / "verifiers"


def main() -> list[Row]:
    from omegaconf import OmegaConf

    from trainctl.envs import verifiers as kind
    from trainctl.runtime.rewards import verifiers as scorer

    if not os.environ.get(kind.VENV_VAR) and kind.ready(REPO / ".venv-verifiers"):
        os.environ[kind.VENV_VAR] = str(REPO / ".venv-verifiers")
    env = OmegaConf.create(
        {
            "id": "vf_arith",
            "args": {"size": 40},
            "path": [str(FIXTURES)],
            "tasks": [],
            "train_size": 30,
            "test_size": 8,
            "seed": 0,
            "curriculum": {"enabled": False},
        }
    )
    problems = kind.problems(env)
    if problems:
        print(f"verifiers bench skipped: {problems[0].message}", file=sys.stderr)
        return []
    row = next(kind.rows(env, "test"))
    starts, trips = [], []
    for _ in range(reps(3)):
        started = time.monotonic()
        scorer.compute_score(row["data_source"], "<answer>0</answer>", "", row["extra_info"])
        starts.append(time.monotonic() - started)
        for _ in range(50):
            started = time.monotonic()
            scorer.compute_score(row["data_source"], "<answer>0</answer>", "", row["extra_info"])
            trips.append(time.monotonic() - started)
        scorer.close_all()
    rows = [
        Row("verifiers worker: start + first score", statistics.median(starts), note="once per scoring process"),
        Row(
            "verifiers: one response's round-trip (ms)",
            1000 * statistics.median(trips),
            unit="ms",
            note="after the start",
        ),
    ]
    report("verifiers", rows)
    return rows


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
