"""Issue 15: GRPO on CPU through verl's main_ppo with trainctl's transformers rollout.

`trainctl train recipe=grpo-arith-tiny-cpu run.max_steps=5`: the tiny model, 8 prompts x 4 samples per step, up to
24 response tokens. Reported: the median wall time per step (steps 2-5 of every run; step 1 includes warm-up), where
it goes (verl's per-phase timings), rollout tokens/s (response tokens / verl's `gen` time, which also holds the
agent loop, the reward and the replay buffer's wait), and the whole run's wall time including Ray's start-up.

The baseline is the same run on an older checkout: BENCH_RL_BASELINE_SRC=<its src folder> (e.g. from
`git worktree add /tmp/before <commit>`); runs alternate (baseline, trainctl, ...) so that a busy minute on a shared
machine hits both alike. Without it, the issue's figures stand in (5.9-7.8 s per step, 182 tokens/s: one request
at a time, and a 2-second replay-buffer poll). BENCH_REPS runs of each (default 2).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from common import ROOT, VENV_BIN, Row, baseline_src, report, reps

TRAINCTL = str(VENV_BIN / "trainctl")
STEPS = 5
SEQUENCES = 8 * 4  # prompts x samples per step (the recipe's train_batch_size x rollout.n)
PHASES = ("gen", "old_log_prob", "ref", "update_actor", "update_weights")
# issue 15's figures for the code before the batched rollout, measured on this machine
ISSUE_STEP_S, ISSUE_TOKENS_PER_S = statistics.mean([5.9, 7.8]), 182.0
TARGET_STEP_S, TARGET_TOKENS_PER_S = 2.0, 4 * ISSUE_TOKENS_PER_S


def _run(src: Path, work: Path, env: dict, name: str) -> dict:
    """One GRPO run with trainctl from `src`: its steps 2-5 and its wall time."""
    from trainctl.metrics import read_metrics

    env = {**env, "PYTHONPATH": str(src)}
    t = time.perf_counter()
    proc = subprocess.run(
        [TRAINCTL, "train", "recipe=grpo-arith-tiny-cpu", f"run.max_steps={STEPS}", f"run.name={name}"],
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
        "tok_s": [m["response_length/mean"] * SEQUENCES / m["timing_s/gen"] for m in steps],
        **{p: [m.get(f"timing_s/{p}", 0.0) for m in steps] for p in PHASES},
    }


def _summary(runs: list[dict]) -> dict:
    out = {k: statistics.median(v for r in runs for v in r[k]) for k in ("step", "tok_s", *PHASES)}
    out["wall"] = statistics.median(r["wall"] for r in runs)
    run_medians = [statistics.median(r["step"]) for r in runs]
    every = [v for r in runs for v in r["step"]]
    out["noise"] = (
        f"per-run medians {', '.join(f'{m:.2f}' for m in run_medians)}s; steps {min(every):.2f}-{max(every):.2f}s"
    )
    return out


def main() -> list[Row]:
    n = reps(2)
    baseline = baseline_src("BENCH_RL_BASELINE_SRC")
    sources = {"trainctl": ROOT / "src"}
    if baseline:
        sources = {"baseline": baseline, **sources}
    runs: dict[str, list[dict]] = {k: [] for k in sources}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = {**os.environ, "TRAINCTL_HOME": str(work / "home"), "TRAINCTL_CACHE": str(work / "cache")}
        for cmd in (["model", "init", "tiny"], ["data", "prep", "arith"]):
            subprocess.run([TRAINCTL, *cmd], env=env, cwd=work, check=True, capture_output=True)
        for i in range(n):
            for label, src in sources.items():
                r = _run(src, work, env, f"grpo-{label}-{i}")
                runs[label].append(r)
                print(f"  {label} run {i + 1}: {r['wall']:.0f}s, step {statistics.median(r['step']):.2f}s", flush=True)
    after = _summary(runs["trainctl"])
    if baseline_src:
        before = _summary(runs["baseline"])
        base_step, base_tok, base_note = before["step"], before["tok_s"], f"baseline {before['noise']}"
    else:
        base_step, base_tok, base_note = ISSUE_STEP_S, ISSUE_TOKENS_PER_S, "baseline: issue 15's figures"
    phases = ", ".join(f"{p} {after[p]:.2f}s" for p in PHASES)
    rows = [
        Row("GRPO step, tiny model, 8 prompts x 4 samples", after["step"], base_step, f"<= {TARGET_STEP_S:.1f}s",
            after["step"] <= TARGET_STEP_S,
            note=f"median over steps 2-{STEPS} of {n} runs: {phases}; {after['noise']}; {base_note}"),
        Row("rollout tokens generated per second", after["tok_s"], base_tok, f">= {TARGET_TOKENS_PER_S:.0f} tok/s",
            after["tok_s"] >= TARGET_TOKENS_PER_S, kind="overhead", unit="tok/s",  # ratio: after / before
            note="response tokens / verl's gen time (batched sampler, agent loop, reward, replay-buffer wait)"),
        Row(f"whole run ({STEPS} steps, with Ray start-up)", after["wall"],
            before["wall"] if baseline_src else None, note=f"median of {n}"),
    ]  # fmt: skip
    report("rl", rows)
    return rows


if __name__ == "__main__":
    main()
