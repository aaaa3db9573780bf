"""Issue 7: GRPO on CPU through verl's main_ppo with trainctl's transformers rollout (no peer runs RL on CPU).

`trainctl train recipe=grpo-arith-tiny-cpu run.max_steps=5`: the tiny model, 8 prompts x 4 samples per step, up to
24 response tokens. Reported: the median wall time per step (steps 2-5; step 1 includes warm-up), the median
rollout time and tokens generated per second of rollout, and the whole run's wall time including Ray's start-up.
There is no baseline to beat: the figures are kept so that they do not regress. BENCH_REPS runs (default 2).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from common import VENV_BIN, Row, report, reps

TRAINCTL = str(VENV_BIN / "trainctl")
STEPS = 5


def main() -> list[Row]:
    n = reps(2)
    step_s, gen_s, tok_s, wall = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = {**os.environ, "TRAINCTL_HOME": str(work / "home"), "TRAINCTL_CACHE": str(work / "cache")}
        for cmd in (["model", "init", "tiny"], ["data", "prep", "arith"]):
            subprocess.run([TRAINCTL, *cmd], env=env, cwd=work, check=True, capture_output=True)
        from trainctl.metrics import read_metrics

        for i in range(n):
            t = time.perf_counter()
            proc = subprocess.run(
                [TRAINCTL, "train", "recipe=grpo-arith-tiny-cpu", f"run.max_steps={STEPS}", f"run.name=grpo-{i}"],
                env=env, cwd=work, capture_output=True, text=True,
            )  # fmt: skip
            wall.append(time.perf_counter() - t)
            if proc.returncode != 0:
                raise RuntimeError(f"the GRPO run failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
            metrics = read_metrics(work / "runs" / f"grpo-{i}")
            for s in range(2, STEPS + 1):
                m = metrics[s]
                step_s.append(m["timing_s/step"])
                gen_s.append(m["timing_s/gen"])
                sequences = 8 * 4
                tok_s.append(m["response_length/mean"] * sequences / m["timing_s/gen"])
            print(f"  run {i + 1}: {wall[-1]:.0f}s, step {statistics.median(step_s[-(STEPS - 1) :]):.2f}s", flush=True)
    rows = [
        Row("GRPO step, tiny model, 8 prompts x 4 samples", statistics.median(step_s),
            note=f"median over steps 2-{STEPS} of {n} runs; rollout {statistics.median(gen_s):.2f}s of it"),
        Row("rollout tokens generated per second", statistics.median(tok_s), unit="tok/s",
            note="response tokens / rollout time (one transformers sampler on 2 cores)"),
        Row(f"whole run ({STEPS} steps, with Ray start-up)", statistics.median(wall), note=f"median of {n}"),
    ]  # fmt: skip
    report("rl", rows)
    return rows


if __name__ == "__main__":
    main()
