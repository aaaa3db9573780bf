"""Issue 11: tools through MCP. What a tool call costs through trainctl's bridge, and an agent GRPO step on CPU.

1. Tool-call latency: the calculator tool called the way verl's tool agent loop calls it (MCPTool.create, execute,
   release, from an asyncio loop), over stdio, SSE and streamable HTTP (servers on 127.0.0.1), against a direct
   Python call of the same function (`calculate`). Median of CALLS calls on a warm connection; the difference is the
   bridge's overhead per call. Also the median time to start the stdio server and connect (the first call of a
   worker pays it once).
2. Agent GRPO step: `trainctl train recipe=grpo-arith-tiny-cpu` through verl's tool agent loop with the calculator
   over stdio, the tiny model after a short warm start on the tool demonstrations (8 prompts x 4 samples, up to 3
   assistant turns); the median step time over steps 2-STEPS, its rollout part, and tool calls per step.

BENCH_REPS sets the GRPO runs (default 1); BENCH_TOOL_CALLS the calls per transport (default 200).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import VENV_BIN, Row, report, reps

TRAINCTL = str(VENV_BIN / "trainctl")
STEPS = 4
EXPRESSION = "12 * (3 + 4)"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen) -> None:
    import socket

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the calculator exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on {port}")


def _tool(spec_json: dict, name: str = "calc"):
    from verl.tools.schemas import OpenAIFunctionToolSchema

    from trainctl.data.tools import calculator_schema
    from trainctl.runtime import mcp_bridge as mb

    config = {"type": "native", "server": name, "server_spec": spec_json, "mcp_tool": "calculator", "timeout": 30.0}
    return mb.MCPTool(config=config, tool_schema=OpenAIFunctionToolSchema.model_validate(calculator_schema()))


async def _calls(tool, n: int) -> list[float]:
    """Seconds per call, as verl's loop makes it (create, execute, release), after one warm-up call."""
    out = []
    for i in range(n + 1):
        start = time.perf_counter()
        instance, _ = await tool.create(create_kwargs={})
        response, _, _ = await tool.execute(instance, {"expression": EXPRESSION})
        await tool.release(instance)
        if response.text != "84":
            raise RuntimeError(f"unexpected answer {response.text!r}")
        if i:
            out.append(time.perf_counter() - start)
    return out


async def _sdk_calls(argv: list[str], n: int) -> list[float]:
    """The same call with the mcp SDK alone (one Client on the caller's loop): the protocol's own cost."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    out = []
    async with Client(StdioServerParameters(command=argv[0], args=argv[1:])) as client:
        for i in range(n + 1):
            start = time.perf_counter()
            await client.call_tool("calculator", {"expression": EXPRESSION})
            if i:
                out.append(time.perf_counter() - start)
    return out


def latency_rows(calls: int) -> list[Row]:
    from trainctl.mcp.discovery import discover
    from trainctl.mcp.specs import parse_server
    from trainctl.runtime import mcp_bridge as mb
    from trainctl.runtime.tools import calculator

    direct = []
    for _ in range(calls * 10):
        start = time.perf_counter()
        calculator.calculate(EXPRESSION)
        direct.append(time.perf_counter() - start)
    direct_ms = statistics.median(direct) * 1e3

    stdio = {"command": sys.executable, "args": [calculator.__file__]}
    b = mb.bridge()
    results: dict[str, float] = {}
    results["stdio"] = statistics.median(asyncio.run(_calls(_tool(stdio), calls))) * 1e3
    asyncio.run(b.acall(b.close_all()))
    sdk_ms = statistics.median(asyncio.run(_sdk_calls([sys.executable, calculator.__file__], calls))) * 1e3

    connects = []
    for _ in range(3):
        spec = parse_server("calc", stdio)
        start = time.perf_counter()
        discover({"calc": spec})  # start, handshake, list tools, stop
        connects.append(time.perf_counter() - start)

    for transport, path in (("sse", "/sse"), ("streamable-http", "/mcp")):
        port = _free_port()
        argv = [sys.executable, calculator.__file__, "--transport", transport, "--port", str(port)]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            _wait_port(port, proc)
            spec = {"type": transport, "url": f"http://127.0.0.1:{port}{path}"}
            results[transport] = statistics.median(asyncio.run(_calls(_tool(spec), calls))) * 1e3
            asyncio.run(b.acall(b.close_all()))
        finally:
            proc.terminate()
            proc.wait(10)

    rows = [
        Row(
            f"tool call through the bridge, {t} (ms)",
            ms,
            baseline_s=direct_ms,
            kind="overhead",
            unit="ms",
            note=f"median of {calls} calls; direct {direct_ms * 1e3:.1f} us; overhead {ms - direct_ms:.2f} ms/call",
        )
        for t, ms in results.items()
    ]
    rows.append(
        Row(
            "the same stdio call, mcp SDK alone (ms)",
            sdk_ms,
            baseline_s=direct_ms,
            kind="overhead",
            unit="ms",
            note=f"one Client on the caller's loop: the bridge adds {results['stdio'] - sdk_ms:.2f} ms/call "
            "(thread hop, verl's create/execute/release, the call log)",
        )
    )
    rows.append(
        Row(
            "stdio server start + connect + list tools",
            statistics.median(connects),
            note="once per agent-loop worker (python + mcp import dominate)",
        )
    )
    return rows


def grpo_rows(n: int) -> list[Row]:
    """`trainctl train recipe=agent-arith-tiny-cpu` as a user runs it (model init tiny-tools, data prep arith-tools)."""
    from trainctl.metrics import read_metrics
    from trainctl.runtime.tool_calls import read_call_logs

    step_s, gen_s, calls_per_step, wall = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = {**os.environ, "TRAINCTL_HOME": str(work / "home"), "TRAINCTL_CACHE": str(work / "cache")}
        start = time.perf_counter()
        subprocess.run([TRAINCTL, "model", "init", "tiny-tools"], env=env, cwd=work, check=True, capture_output=True)
        warm_s = time.perf_counter() - start
        subprocess.run([TRAINCTL, "data", "prep", "arith-tools"], env=env, cwd=work, check=True, capture_output=True)
        for i in range(n):
            argv = [TRAINCTL, "train", "recipe=agent-arith-tiny-cpu", f"run.max_steps={STEPS}", f"run.name=agent-{i}"]
            start = time.perf_counter()
            proc = subprocess.run(argv, env=env, cwd=work, capture_output=True, text=True)
            wall.append(time.perf_counter() - start)
            if proc.returncode != 0:
                raise RuntimeError(f"the agent GRPO run failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
            run = work / "runs" / f"agent-{i}"
            metrics = read_metrics(run)
            for s in range(2, STEPS + 1):
                step_s.append(metrics[s]["timing_s/step"])
                gen_s.append(metrics[s]["timing_s/gen"])
            calls_per_step.append(len(read_call_logs(run / "tools" / "calls")) / STEPS)
            print(f"  run {i + 1}: {wall[-1]:.0f}s, step {statistics.median(step_s[-(STEPS - 1) :]):.2f}s", flush=True)
        sample = json.loads((work / "runs" / "agent-0" / "rollouts" / f"{STEPS}.jsonl").read_text().splitlines()[0])
    return [
        Row(
            "agent GRPO step (recipe=agent-arith-tiny-cpu, calculator over stdio)",
            statistics.median(step_s),
            note=f"median over steps 2-{STEPS} of {n} run(s); rollout {statistics.median(gen_s):.2f}s of it; "
            f"{statistics.median(calls_per_step):.0f} tool calls per step",
        ),
        Row(f"whole agent run ({STEPS} steps, with Ray start-up)", statistics.median(wall), note=f"median of {n}"),
        Row(
            "model init tiny-tools (the warm start trainctl ships, copied)",
            warm_s,
            note=f"a rollout: {sample['output'][:90]!r}",
        ),
    ]


def main() -> list[Row]:
    calls = int(os.environ.get("BENCH_TOOL_CALLS", 200))
    rows = latency_rows(calls)
    report("tools", rows)
    rows += grpo_rows(reps(1))
    report("tools", rows)
    return rows


if __name__ == "__main__":
    main()
