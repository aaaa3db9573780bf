"""Issue 14: the CPU GRPO step with LoRA (`lora=r8`) against full fine-tuning, same settings otherwise.

`trainctl train recipe=grpo-arith-tiny-cpu run.max_steps=5 [lora=r8]`: the tiny model, 8 prompts x 4 samples per
step, up to 24 response tokens, trainctl's hf rollout. Runs alternate (full, LoRA, full, ...) so that a busy minute
on a shared machine hits both alike. Reported: the median wall time per step over steps 2-5 of every run (step 1
includes warm-up) and its ratio LoRA / full, with verl's per-phase medians (LoRA's weight sync ships the adapters
alone, and the rollout folds them in; its backward computes gradients for the adapters only). BENCH_REPS runs of
each (default 2).
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
PHASES = ("gen", "old_log_prob", "ref", "update_actor", "update_weights")
SETTINGS = {"full": [], "lora": ["lora=r8"]}


def _run(work: Path, env: dict, name: str, extra: list[str]) -> dict:
    from trainctl.metrics import read_metrics

    t = time.perf_counter()
    proc = subprocess.run(
        [TRAINCTL, "train", "recipe=grpo-arith-tiny-cpu", f"run.max_steps={STEPS}", f"run.name={name}", *extra],
        env=env, cwd=work, capture_output=True, text=True,
    )  # fmt: skip
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"the GRPO run {name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    metrics = read_metrics(work / "runs" / name)
    steps = [metrics[s] for s in range(2, STEPS + 1)]
    return {
        "wall": wall,
        "step": [m["timing_s/step"] for m in steps],
        **{p: [m.get(f"timing_s/{p}", 0.0) for m in steps] for p in PHASES},
    }


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(v for r in runs for v in r[key])


def main() -> list[Row]:
    n = reps(2)
    runs: dict[str, list[dict]] = {k: [] for k in SETTINGS}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = {**os.environ, "TRAINCTL_HOME": str(work / "home"), "TRAINCTL_CACHE": str(work / "cache")}
        for cmd in (["model", "init", "tiny"], ["data", "prep", "arith"]):
            subprocess.run([TRAINCTL, *cmd], env=env, cwd=work, check=True, capture_output=True)
        for i in range(n):
            for label, extra in SETTINGS.items():
                r = _run(work, env, f"grpo-{label}-{i}", extra)
                runs[label].append(r)
                print(f"  {label} run {i + 1}: {r['wall']:.0f}s, step {statistics.median(r['step']):.2f}s", flush=True)
    full, lora = runs["full"], runs["lora"]

    def phases(rs: list[dict]) -> str:
        return ", ".join(f"{p} {_median(rs, p):.2f}s" for p in PHASES)

    def per_run(rs: list[dict]) -> str:
        return ", ".join(f"{statistics.median(r['step']):.2f}" for r in rs)

    rows = [
        Row("GRPO step, tiny model, lora=r8 (baseline: full)", _median(lora, "step"), _median(full, "step"),
            kind="overhead",  # ratio: LoRA / full
            note=f"median over steps 2-{STEPS} of {n} runs each; LoRA: {phases(lora)} (per-run {per_run(lora)}s); "
                 f"full: {phases(full)} (per-run {per_run(full)}s)"),
        Row(f"whole run ({STEPS} steps, with Ray start-up), lora=r8", statistics.median(r["wall"] for r in lora),
            statistics.median(r["wall"] for r in full), kind="overhead", note=f"median of {n}"),
    ]  # fmt: skip
    report("lora", rows)
    return rows


if __name__ == "__main__":
    main()
