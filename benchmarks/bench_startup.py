"""Issue 54: how fast a run starts, steps and answers, against an older checkout, in one run.

A tiny GRPO run (`trainctl train recipe=grpo-arith-tiny-cpu run.max_steps=5`) and the plan's first answers, each
interleaved with the same command on the baseline checkout (BENCH_BASELINE_SRC=<its src>, from
`git worktree add /tmp/base-7cbd8d3 7cbd8d3`: PYTHONPATH puts its source first for trainctl and for every process
of the run, verl's plugin included). Without a baseline, the issue's figures for 7cbd8d3 stand in. Reported, medians
of BENCH_REPS runs of each (default 3):

- the first step logged: seconds from the command to the run's metrics file holding step 1 (what `trainctl runs` and
  the live view read);
- the step: the median of verl's timing_s/step over steps 2-5 of every run, with its phases;
- the whole 5-step run, with Ray's start-up and the run's end;
- `trainctl config validate` with a key typo (the first config error), and `trainctl --help`.

And where one run's start-up went (the last run of each checkout), read from the run's own log: the milestones its
lines carry with a clock time (Ray up; verl's dataloader, actor and reference, reward loop, rollout servers, ready to
fit; trainctl's fork server) and, from the log of the Ray session the run started, each Ray worker's start with the
actor it hosts, all as seconds from the command. Written to benchmarks/results/startup-timeline.txt too.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import tempfile
import time
from datetime import datetime
from pathlib import Path

from common import RESULTS, VENV_BIN, Row, baseline_src, interleaved, report, reps

TRAINCTL = str(VENV_BIN / "trainctl")
STEPS = 5
RECIPE = ["train", "recipe=grpo-arith-tiny-cpu", f"run.max_steps={STEPS}"]
PHASES = ("gen", "old_log_prob", "ref", "update_actor", "update_weights")
# the issue's figures for 7cbd8d3 (quiet 2-core machine), when no baseline checkout is given
ISSUE = {"first_step": 61.6, "step": 2.31, "wall": 83.5, "typo": 0.645, "help": 0.131}
TARGETS = {"first_step": 20.0, "step": 1.0, "wall": 30.0, "typo": 0.3, "help": 0.1}

# lines of the run's log that carry a clock time: (label, pattern); the time is the line's own
MILESTONES = (
    ("Ray started", re.compile(r"Started a local Ray instance")),
    ("dataloader ready", re.compile(r"train and validate dataloader initialized")),
    ("actor and reference ready", re.compile(r"actor and ref model engine initialized")),
    ("reward loop ready", re.compile(r"reward loop manager initialized")),
    ("rollout servers ready", re.compile(r"checkpoint engine manager initialized")),
    ("ready to fit", re.compile(r"all initialize finished, ready to fit")),
)
_CLOCK = re.compile(r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}),(\d{3})")


def _clock(line: str) -> float | None:
    found = _CLOCK.search(line)
    if not found:
        return None
    return datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S").timestamp() + int(found.group(2)) / 1000


def _grpo(src: Path | None, work: Path, env: dict, name: str) -> dict:
    """One run: its first step logged, its steps, its wall time, and its start-up timeline."""
    env = {**env, **({"PYTHONPATH": str(src)} if src else {})}
    metrics = work / "runs" / name / "metrics" / "attempt-1.jsonl"
    ray_sessions = set(Path("/tmp/ray").glob("session_2*"))
    start = time.time()
    proc = subprocess.Popen(
        [TRAINCTL, *RECIPE, f"run.name={name}"], env=env, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    first_step = None
    while proc.poll() is None:
        if first_step is None and metrics.is_file() and metrics.read_text().strip():
            first_step = time.time() - start
        time.sleep(0.05)
    wall = time.time() - start
    output = proc.stdout.read().decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"the GRPO run {name} failed:\n{output[-3000:]}")
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    steps = [r["data"] for r in rows if r.get("step", 0) >= 2]
    new_sessions = sorted(set(Path("/tmp/ray").glob("session_2*")) - ray_sessions)
    return {
        "first_step": first_step if first_step is not None else wall,
        "wall": wall,
        "step": [s["timing_s/step"] for s in steps],
        **{p: [s.get(f"timing_s/{p}", 0.0) for s in steps] for p in PHASES},
        "timeline": _timeline(work / "runs" / name / "logs" / "attempt-1.log", new_sessions, start),
    }


def _timeline(log: Path, sessions: list[Path], start: float) -> list[tuple[float, str]]:
    """(seconds from the command, what happened), from the run's log and its Ray session's raylet log."""
    events: list[tuple[float, str]] = []
    attempt = json.loads((log.parent.parent / "run.json").read_text())["attempts"][0]
    launched = datetime.strptime(attempt["started"], "%Y-%m-%dT%H:%M:%S%z").timestamp()
    events.append((launched - start, "trainer started: trainctl's checks done (run.json, to the second)"))
    lines = log.read_text(errors="replace").splitlines()
    for label, pattern in MILESTONES:
        at = next((_clock(line) for line in lines if pattern.search(line) and _clock(line)), None)
        if at is not None:
            events.append((at - start, label))
    for line in lines:
        if "trainctl forkserver: the workers' modules preloaded" in line:
            events.append((float("nan"), line.split("trainctl forkserver: ", 1)[1]))
    for session in sessions[-1:]:
        logs = session / "logs"
        names = {}
        for out in logs.glob("worker-*.out"):
            found = re.search(r":actor_name:(\w+)", out.read_text(errors="replace")[:4096])
            names[out.name.split("-")[1]] = found.group(1) if found else "(no actor)"
        raylet = logs / "raylet.out"
        for line in raylet.read_text(errors="replace").splitlines() if raylet.is_file() else []:
            found = re.search(r"Started worker process with pid (\d+) worker_id=(\w+)", line)
            if found and (at := _clock(line)):
                events.append((at - start, f"Ray worker started: {names.get(found.group(2), '?')}"))
    return sorted(events, key=lambda e: (e[0] != e[0], e[0]))


def _summary(runs: list[dict]) -> dict:
    out = {k: statistics.median(v for r in runs for v in r[k]) for k in ("step", *PHASES)}
    for k in ("first_step", "wall"):
        out[k] = statistics.median(r[k] for r in runs)
        out[f"{k}_all"] = ", ".join(f"{r[k]:.1f}" for r in runs)
    return out


def main() -> list[Row]:
    n = reps(3)
    baseline = baseline_src()
    sources = {"trainctl": None}
    if baseline:
        sources = {"baseline": baseline, **sources}
    runs: dict[str, list[dict]] = {k: [] for k in sources}
    answers: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = {**os.environ, "TRAINCTL_HOME": str(work / "home"), "TRAINCTL_CACHE": str(work / "cache")}
        env.pop("RAY_ADDRESS", None)
        for cmd in (["model", "init", "tiny"], ["data", "prep", "arith"]):
            subprocess.run([TRAINCTL, *cmd], env=env, cwd=work, check=True, capture_output=True)
        for i in range(n):
            for label, src in sources.items():
                r = _grpo(src, work, env, f"grpo-{label}-{i}")
                runs[label].append(r)
                print(
                    f"  {label} run {i + 1}: first step {r['first_step']:.1f}s, whole {r['wall']:.1f}s, "
                    f"step {statistics.median(r['step']):.2f}s",
                    flush=True,
                )
        typo = ["config", "validate", "algorithm=grpo", "actor_rollout_ref.actor.optim.lrr=1"]
        for label, src in sources.items():
            side = {**env, **({"PYTHONPATH": str(src)} if src else {})}
            answers[label] = {
                "typo": interleaved({"typo": ([TRAINCTL, *typo], 1)}, side, work, max(n, 9))["typo"],
                "help": interleaved({"help": ([TRAINCTL, "--help"], 0)}, side, work, max(n, 9))["help"],
            }
    after = {**_summary(runs["trainctl"]), **answers["trainctl"]}
    before = {**_summary(runs["baseline"]), **answers["baseline"]} if baseline else ISSUE
    base_note = f"baseline {baseline}" if baseline else "baseline: the issue's figures for 7cbd8d3"
    phases = ", ".join(f"{p} {after[p]:.2f}s" for p in PHASES)
    rows = [
        Row("tiny GRPO: first step logged", after["first_step"], before["first_step"],
            f"<= {TARGETS['first_step']:.0f}s", after["first_step"] <= TARGETS["first_step"],
            note=f"runs: {after['first_step_all']}s; {base_note}"),
        Row("tiny GRPO: step (median of steps 2-5)", after["step"], before["step"], f"<= {TARGETS['step']:.1f}s",
            after["step"] <= TARGETS["step"], note=phases),
        Row(f"tiny GRPO: whole {STEPS}-step run", after["wall"], before["wall"], f"<= {TARGETS['wall']:.0f}s",
            after["wall"] <= TARGETS["wall"], note=f"runs: {after['wall_all']}s"),
        Row("config validate with a key typo", after["typo"], before["typo"], f"<= {TARGETS['typo']}s",
            after["typo"] <= TARGETS["typo"]),
        Row("trainctl --help", after["help"], before["help"], f"<= {TARGETS['help']}s",
            after["help"] <= TARGETS["help"]),
    ]  # fmt: skip
    report("startup", rows)
    text = []
    for label, label_runs in runs.items():
        text.append(f"{label}: where the start-up of its last run went (seconds from the command)")
        text += [f"  {at:6.1f}  {what}" if at == at else f"     -  {what}" for at, what in label_runs[-1]["timeline"]]
        text.append(f"  {label_runs[-1]['first_step']:6.1f}  step 1 logged")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "startup-timeline.txt").write_text("\n".join(text) + "\n")
    print("\n" + "\n".join(text))
    return rows


if __name__ == "__main__":
    main()
