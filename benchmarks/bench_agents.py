"""Issue 30: agent eval's throughput, the tokenization preflight's cost, and a tool call's latency inside a real
agent run.

1. Agent eval: `trainctl eval tiny-tools data=arith-tools tools=calculator n=4 temperature=1` (64 test prompts x 4
   samples = 256 trajectories through verl's tool agent loop and the calculator over stdio): trajectories per second
   of generation (the model's loading and the servers' start not counted), median of BENCH_REPS runs; against the
   same prompts scored single-turn (tools=none: one generation per sample, no tool round-trips).
2. The preflight (trainctl.toolenv.preflight.run): one scripted trajectory through the real calculator server and
   the model's chat template, median of BENCH_REPS runs, in this process.
3. A tool call inside a real agent run (`trainctl train recipe=agent-arith-tiny-cpu`, 4 steps; the median of
   BENCH_REPS runs' medians, and of the middle run where its time went): the median, mean
   and 90th percentile of each call's seconds as the caller saw them (the run's tools/calls/*.jsonl), and the mean
   of the first step's calls (where the stdio server's start-up went before trainctl warmed the connection when the
   agent-loop worker built its tools). The calls of one step arrive together (the batch's first turns end
   together): the note gives how many, and the median of each step's calls. BENCH_AGENT_OVERRIDES adds overrides
   to the run (`hardware.worker_processes=2`: two agent-loop workers), to measure a variant.
4. The floor under (3): the same number of calls sent at once to one calculator over stdio, through the mcp SDK
   alone (trainctl.mcp.connection), on an otherwise idle machine: the median call, median of BENCH_REPS bursts; and
   the same with the calls spread over two calculator processes.
"""

from __future__ import annotations

import itertools
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import VENV_BIN, Row, report, reps

TRAINCTL = str(VENV_BIN / "trainctl")
STEPS = 4
TRAJECTORIES = 64 * 4


def _setup(work: Path) -> dict:
    env = {**os.environ, "TRAINCTL_HOME": str(work / "home"), "TRAINCTL_CACHE": str(work / "cache")}
    subprocess.run([TRAINCTL, "model", "init", "tiny-tools"], env=env, cwd=work, check=True, capture_output=True)
    subprocess.run([TRAINCTL, "data", "prep", "arith-tools"], env=env, cwd=work, check=True, capture_output=True)
    return env


def _generation_seconds(argv: list[str], env: dict, cwd: Path) -> float:
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} failed:\n{proc.stderr[-2000:]}")
    found = re.search(r"tokens generated in ([0-9.]+) s", proc.stderr)
    if not found:
        raise RuntimeError(f"no generation time in:\n{proc.stderr[-2000:]}")
    return float(found.group(1))


def eval_rows(work: Path, env: dict, n: int) -> list[Row]:
    common = ["tiny-tools", "data=arith-tools", "reward=rule", "n=4", "temperature=1.0", "seed=1"]
    agent, single = [], []
    for i in range(n):
        out = work / "evals" / str(i)
        agent.append(
            _generation_seconds([TRAINCTL, "eval", *common, "tools=calculator", "--out", f"{out}-a"], env, work)
        )
        single.append(_generation_seconds([TRAINCTL, "eval", *common, "--out", f"{out}-s"], env, work))
        print(f"  eval {i + 1}: agent {agent[-1]:.2f}s, single-turn {single[-1]:.2f}s", flush=True)
    a, s = statistics.median(agent), statistics.median(single)
    return [
        Row(
            "agent eval: trajectories/s (tiny-tools, 64 prompts x 4, calculator over stdio)",
            TRAJECTORIES / a,
            baseline_s=TRAJECTORIES / s,
            kind="overhead",
            unit="traj/s",
            note=f"median of {n}: {a:.2f} s of generation for {TRAJECTORIES} trajectories (up to 3 assistant turns "
            f"each); baseline: the same samples single-turn without tools, {s:.2f} s",
        )
    ]


def preflight_rows(work: Path, env: dict, n: int) -> list[Row]:
    code = """
import json, statistics, sys, time
from trainctl.checks.tools import probes
from trainctl.plan import resolve
from trainctl.toolenv import preflight
plan = resolve(["recipe=agent-arith-tiny-cpu"])
t = time.perf_counter(); probes(plan.subject); listing = time.perf_counter() - t
document = plan.subject.extra["tools"]["document"]
times = []
for _ in range(int(sys.argv[1])):
    t = time.perf_counter(); _, problems = preflight.run(plan.cfg, document); times.append(time.perf_counter() - t)
    assert not problems, problems
print(json.dumps({"preflight": statistics.median(times), "listing": listing}))
"""
    proc = subprocess.run(
        [sys.executable, "-c", code, str(n)], env=env, cwd=work, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    import json

    found = json.loads(proc.stdout.strip().splitlines()[-1])
    return [
        Row(
            "tokenization preflight (one scripted trajectory, the real calculator)",
            found["preflight"],
            note=f"median of {n}, the server started for each; listing the servers first took {found['listing']:.2f}s",
        )
    ]


def _agent_run_calls(work: Path, env: dict, name: str) -> list[dict]:
    from trainctl.runtime.tool_calls import read_call_logs

    # BENCH_AGENT_OVERRIDES: more overrides for the run (e.g. hardware.worker_processes=2), to measure a variant
    extra = os.environ.get("BENCH_AGENT_OVERRIDES", "").split()
    argv = [TRAINCTL, "train", "recipe=agent-arith-tiny-cpu", f"run.max_steps={STEPS}", f"run.name={name}", *extra]
    proc = subprocess.run(argv, env=env, cwd=work, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"the agent run failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return sorted(read_call_logs(work / "runs" / name / "tools" / "calls"), key=lambda r: r["time"])


def in_run_rows(work: Path, env: dict, n: int) -> list[Row]:
    """n agent runs (their medians differ by up to 1.5x from run to run: how the bursts meet the tokenizing)."""
    runs = [_agent_run_calls(work, env, f"agent-bench-{i}") for i in range(n)]
    run_medians = [statistics.median(float(c["seconds"]) * 1e3 for c in calls) for calls in runs]
    # the run whose median is the median of the runs' medians tells where a call's time goes
    calls = runs[run_medians.index(statistics.median_low(run_medians))]
    ms = sorted(float(c["seconds"]) * 1e3 for c in calls)

    def median_ms(field: str) -> float:
        return statistics.median(float(c[field]) * 1e3 for c in calls if c.get(field) is not None)

    # the steps' bursts of calls: a gap of more than a second between two calls starts the next
    bursts = [[calls[0]]]
    for prev, cur in itertools.pairwise(calls):
        if cur["time"] - prev["time"] > 1.0:
            bursts.append([])
        bursts[-1].append(cur)
    first = [float(c["seconds"]) for c in bursts[0]]
    per_step = ", ".join(f"{statistics.median(float(c['seconds']) for c in b) * 1e3:.0f}" for b in bursts)
    found = statistics.median(run_medians)
    return [
        Row(
            "tool call inside an agent run (calculator over stdio; median, ms)",
            found,
            target="<= 50 ms",
            ok=found <= 50,
            unit="ms",
            note=f"median of {n} runs' medians ({', '.join(f'{m:.1f}' for m in run_medians)}); in the middle run: "
            f"{len(ms)} calls in {STEPS} steps; mean {statistics.mean(ms):.1f} ms, "
            f"p90 {ms[int(0.9 * len(ms))]:.1f} ms; the first step's {len(first)} calls: "
            f"mean {statistics.mean(first) * 1e3:.1f} ms; of a call (medians): the server's request and answer "
            f"over the open connection {median_ms('server_seconds'):.1f} ms, the hop from the caller's loop to the "
            f"bridge's {median_ms('hop_in_seconds'):.1f} ms and back {median_ms('hop_out_seconds'):.1f} ms; calls "
            f"per step arriving together: {[len(b) for b in bursts]}, median of each step's calls (ms): {per_step}",
        )
    ]


def burst_rows(n: int, size: int = 27) -> list[Row]:
    """`size` calls at once through the mcp SDK alone, to one calculator and spread over two."""
    import asyncio

    from trainctl.mcp.connection import Connection
    from trainctl.mcp.specs import ServerSpec
    from trainctl.runtime.tools import calculator

    spec = ServerSpec(name="calculator", transport="stdio", command=sys.executable, args=(calculator.__file__,))

    async def medians(servers: int) -> list[float]:
        conns = [Connection(spec) for _ in range(servers)]
        for c in conns:
            await c.open(60)
            await c.call("calculator", {"expression": "1+1"}, 10)

        async def one(i: int) -> float:
            start = time.perf_counter()
            await conns[i % servers].call("calculator", {"expression": f"{i} * 3 + 4"}, 10)
            return time.perf_counter() - start

        found = []
        for _ in range(n):
            found.append(statistics.median(await asyncio.gather(*(one(i) for i in range(size)))))
        for c in conns:
            await c.close()
        return found

    rows = []
    for servers in (1, 2):
        found = asyncio.run(medians(servers))
        rows.append(
            Row(
                f"{size} calls at once, the mcp SDK alone, {servers} calculator process(es) (median call, ms)",
                statistics.median(found) * 1e3,
                unit="ms",
                note=f"median of {n} bursts on an otherwise idle machine: the floor under the in-run figure",
            )
        )
    return rows


def main() -> list[Row]:
    n = reps(3)
    if os.environ.get("BENCH_AGENTS_ONLY") == "burst":  # the mcp SDK's floor alone
        rows = burst_rows(n)
        report("agents-burst", rows)
        return rows
    if os.environ.get("BENCH_AGENTS_ONLY") == "in-run":  # the agent run alone
        with tempfile.TemporaryDirectory() as tmp:
            rows = in_run_rows(Path(tmp), _setup(Path(tmp)), n)
        report("agents-in-run", rows)
        return rows
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        start = time.perf_counter()
        env = _setup(work)
        print(f"  set-up (model init tiny-tools, data prep arith-tools): {time.perf_counter() - start:.0f}s")
        rows = eval_rows(work, env, n)
        rows += preflight_rows(work, env, n)
        rows += in_run_rows(work, env, n)
        rows += burst_rows(n)
    report("agents", rows)
    return rows


if __name__ == "__main__":
    main()
