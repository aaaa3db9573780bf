"""Issue 3: `trainctl train` against the equivalent raw `torchrun -m verl.trainer.sft_trainer ...` on CPU.

The raw command is the one trainctl writes into the run folder's command.sh (verl's defaults plus overrides),
given the same environment (VERL_PLATFORM=cpu selects trainctl's verl plugin: without it verl cannot train on a
CPU at all). Target: wall-time ratio <= 1.05 (median of 5, interleaved), and the same loss at every step.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from common import VENV_BIN, Row, report, reps

TRAINCTL = str(VENV_BIN / "trainctl")
RUN = ["recipe=quickstart", "run.max_steps=8"]


def _losses(path: Path) -> list[float]:
    out = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if "train/loss" in rec["data"]:
            out.append(rec["data"]["train/loss"])
    return out


def _timed(argv: list[str], env: dict, cwd: Path) -> float:
    t = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:3]} failed:\n{proc.stdout[-1500:]}\n{proc.stderr[-1500:]}")
    return time.perf_counter() - t


def main() -> list[Row]:
    n = reps()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = {**os.environ, "TRAINCTL_HOME": str(work / "home"), "TRAINCTL_CACHE": str(work / "cache")}
        for var in ("WANDB_API_KEY", "RAY_ADDRESS"):
            env.pop(var, None)
        subprocess.run([TRAINCTL, "model", "init", "tiny"], env=env, cwd=work, check=True, capture_output=True)
        subprocess.run([TRAINCTL, "data", "prep", "arith"], env=env, cwd=work, check=True, capture_output=True)

        os.environ.update(TRAINCTL_HOME=env["TRAINCTL_HOME"], TRAINCTL_CACHE=env["TRAINCTL_CACHE"])
        from trainctl.launch.runner import full_command
        from trainctl.plan import make_plan

        def raw(i: int) -> tuple[list[str], dict, Path]:
            plan = make_plan([*RUN, f"run.dir={work}/raw-{i}"], native=False)
            command = full_command(plan)
            metrics = work / f"raw-{i}.jsonl"
            extra = {
                k: v for k, v in command.env.items() if k not in ("VERL_FILE_LOGGER_PATH", "TRAINCTL_METRICS_PATH")
            }
            return command.raw_argv, {**env, **extra, "VERL_FILE_LOGGER_PATH": str(metrics)}, metrics

        t_times, r_times = [], []
        first_t = _timed([TRAINCTL, "train", *RUN, "run.name=first"], env, work)  # also fills the caches
        for i in range(n):
            argv, raw_env, _ = raw(i)
            r_times.append(_timed(argv, raw_env, work))
            t_times.append(_timed([TRAINCTL, "train", *RUN, f"run.name=bench-{i}"], env, work))
        same = all(
            _losses(work / "runs" / f"bench-{i}" / "metrics" / "attempt-1.jsonl") == _losses(work / f"raw-{i}.jsonl")
            for i in range(n)
        )
        steps = len(_losses(work / "raw-0.jsonl"))
        t, r = statistics.median(t_times), statistics.median(r_times)
        rows = [
            Row(
                f"SFT on CPU, 8 steps (median of {n})",
                t,
                r,
                target="trainctl/raw <= 1.05",
                ok=t / r <= 1.05,
                kind="overhead",
                note=f"the first trainctl run, which also validates the config with verl: {first_t:.1f} s",
            ),
            Row(
                f"same train/loss at each of {steps} steps",
                0.0,
                None,
                target="identical",
                ok=same,
                note="compared step by step, exactly" if same else "LOSSES DIFFER",
            ),
        ]
    report("launch", rows)
    return rows


if __name__ == "__main__":
    main()
