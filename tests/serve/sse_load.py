"""Many clients on one run's live stream while the run writes metrics (tests/serve/test_events.py, bounded, and
benchmarks/bench_serve.py, bigger): every client must see every step once, a client that drops its connection
midway and reconnects with Last-Event-ID included; with the figures (first event, step latency, server RSS, events
per client).

The run is a run folder that says it runs (its supervisor: a `sleep` of ours); the writer appends its metrics and log
lines as verl's file logger and a trainer's console do, one step at a time."""

from __future__ import annotations

import asyncio
import json
import socket
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil


def live_run(run: Path) -> subprocess.Popen:
    """A run folder that says it is running, supervised by a process of ours, with no step yet. Returns that
    process (the caller ends it)."""
    (run / "metrics").mkdir(parents=True)
    (run / "logs").mkdir()
    proc = subprocess.Popen(["sleep", "3600"], start_new_session=True)
    started = time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime())
    status = {
        "name": run.name, "algorithm": "sft", "family": "sft", "backend": "verl-sft", "model": "tiny",
        "data": "arith", "args": [], "created": started, "state": "running",
        "attempts": [{"n": 1, "started": started, "launcher": "local", "log": "logs/attempt-1.log",
                      "metrics": "metrics/attempt-1.jsonl", "steps_total": 100_000}],
        "live": {"pid": proc.pid, "pid_started": psutil.Process(proc.pid).create_time(), "trainer_pid": None,
                 "host": socket.gethostname(), "heartbeat": time.time()},
    }  # fmt: skip
    (run / "run.json").write_text(json.dumps(status))
    (run / "trainctl.yaml").write_text("algorithm:\n  name: sft\nmodel:\n  name: tiny\ndata:\n  name: arith\n")
    (run / "metrics" / "attempt-1.jsonl").write_text("")
    (run / "logs" / "attempt-1.log").write_text("")
    return proc


@dataclass
class Client:
    n: int
    reconnect_at: int | None  # drop the connection once this step arrived, then come back with Last-Event-ID
    steps: list[int] = field(default_factory=list)  # every step received, in order, duplicates kept
    arrived: dict[int, float] = field(default_factory=dict)  # step -> when it first arrived
    first_event: float | None = None  # seconds from connecting to the first event
    events: int = 0
    connections: int = 0
    error: str | None = None


@dataclass
class Load:
    clients: list[Client]
    written: dict[int, float]  # step -> when its line was written
    connected_s: float  # until every client had its first event
    rss_mb: float  # the server's peak RSS
    seconds: float

    def problems(self, steps: int) -> list[str]:
        """Every client saw steps 1..steps once each: the Last-Event-ID contract (reconnects included)."""
        want = list(range(1, steps + 1))
        out = []
        for c in self.clients:
            if c.error:
                out.append(f"client {c.n}: {c.error}")
            elif c.steps != want:
                twice = sorted({s for s in c.steps if c.steps.count(s) > 1})
                missing = sorted(set(want) - set(c.steps))
                out.append(f"client {c.n} ({c.connections} connections): twice {twice[:5]}, missing {missing[:5]}")
        return out

    def latencies(self) -> list[float]:
        return sorted(c.arrived[s] - self.written[s] for c in self.clients for s in c.arrived if s in self.written)

    def figures(self) -> str:
        lat = self.latencies()
        q = statistics.quantiles(lat, n=100) if len(lat) > 1 else lat * 99
        firsts = sorted(c.first_event for c in self.clients if c.first_event is not None)
        per = statistics.median(c.events for c in self.clients)
        again = sum(c.connections > 1 for c in self.clients)
        return (
            f"{len(self.clients)} clients ({again} reconnected with Last-Event-ID), {len(self.written)} steps in "
            f"{self.seconds:.1f} s: first event within {firsts[-1]:.2f} s (median {statistics.median(firsts):.2f} s), "
            f"all connected in {self.connected_s:.2f} s; step written -> received: median {q[49] * 1000:.0f} ms, "
            f"p99 {q[98] * 1000:.0f} ms, max {lat[-1] * 1000:.0f} ms; {per:.0f} events per client (median); "
            f"server RSS {self.rss_mb:.0f} MB at most"
        )


async def _watch(http: httpx.AsyncClient, url: str, c: Client, last_step: int, start: float) -> None:
    headers: dict[str, str] = {}
    eid = None
    while True:
        c.connections += 1
        t0 = time.monotonic()
        again = False
        # back with every step already (it was behind: the rest came in one event): it listens a second more,
        # for anything sent twice
        linger = 1.0 if c.connections > 1 and max(c.steps, default=0) >= last_step else None
        async with http.stream("GET", url, headers=headers) as r:
            if r.status_code != 200:
                c.error = f"HTTP {r.status_code}"
                return
            kind = data = None
            lines = r.aiter_lines()
            while True:
                try:
                    line = await asyncio.wait_for(anext(lines), linger) if linger else await anext(lines)
                except (TimeoutError, StopAsyncIteration) as e:
                    if isinstance(e, TimeoutError):
                        return
                    break
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: "):
                    data = line[6:]
                elif line.startswith("id: "):
                    eid = line[4:]
                elif line == "" and kind:
                    c.events += 1
                    if c.first_event is None:
                        c.first_event = time.monotonic() - t0
                    if kind == "metrics":
                        now = time.monotonic()
                        for s in json.loads(data)["steps"]:
                            c.steps.append(s)
                            c.arrived.setdefault(s, now)
                    kind = data = None
                    top = max(c.steps, default=0)
                    if c.reconnect_at is not None and c.connections == 1 and top >= c.reconnect_at:
                        again = True
                        break  # the connection drops (a closed laptop lid, a proxy's timeout)
                    if top >= last_step and not linger:
                        return
        if not again:
            c.error = c.error or f"the stream ended at step {max(c.steps, default=0)}"
            return
        headers = {"Last-Event-ID": eid}


async def _write(run: Path, steps: int, every: float, written: dict[int, float], go: asyncio.Event) -> None:
    await go.wait()
    metrics, log = run / "metrics" / "attempt-1.jsonl", run / "logs" / "attempt-1.log"
    for step in range(1, steps + 1):
        with open(log, "a") as f:
            f.write(f"step {step}: loss {1.0 / step:.4f}\n")
        with open(metrics, "a") as f:
            f.write(json.dumps({"step": step, "data": {"train/loss": 1.0 / step, "train/lr": 1e-5}}) + "\n")
        written[step] = time.monotonic()
        await asyncio.sleep(every)


async def _load(url: str, uuid: str, run: Path, server_pid: int, clients: int, steps: int, every: float,
                reconnecting: int, timeout: float) -> Load:  # fmt: skip
    cursor = httpx.get(f"{url}/api/jobs/{uuid}/metrics", timeout=60).headers["x-trainctl-cursor"]
    stream = f"{url}/api/jobs/{uuid}/events?cursor={cursor}"
    # a third of them (or as asked) drop midway and come back with Last-Event-ID
    watchers = [Client(i, steps // 2 if i < reconnecting else None) for i in range(clients)]
    written: dict[int, float] = {}
    go = asyncio.Event()
    server = psutil.Process(server_pid)
    rss = [server.memory_info().rss]
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    t0 = time.monotonic()
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=timeout), limits=limits) as http:
        tasks = [asyncio.create_task(_watch(http, stream, c, steps, t0)) for c in watchers]
        writer = asyncio.create_task(_write(run, steps, every, written, go))
        deadline = t0 + timeout
        while any(c.first_event is None and c.error is None for c in watchers) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        connected = time.monotonic() - t0
        go.set()
        while not all(t.done() for t in tasks) and time.monotonic() < deadline:
            rss.append(server.memory_info().rss)
            await asyncio.sleep(0.2)
        for c, t in zip(watchers, tasks, strict=True):
            if not t.done():
                t.cancel()
                c.error = c.error or f"still waiting after {timeout:.0f} s, at step {max(c.steps, default=0)}"
            elif t.exception() is not None:
                c.error = f"{type(t.exception()).__name__}: {t.exception()}"
        await asyncio.gather(*tasks, writer, return_exceptions=True)
    return Load(watchers, written, connected, max(rss) / 2**20, time.monotonic() - t0)


def load(url: str, uuid: str, run: Path, server_pid: int, clients: int = 300, steps: int = 30, every: float = 0.1,
         reconnecting: int | None = None, timeout: float = 120.0) -> Load:  # fmt: skip
    """`clients` streams of the run at `url` (from the end of its history), then `steps` steps written one every
    `every` seconds; `reconnecting` of the clients (default a third) drop once half the steps arrived and come back
    with Last-Event-ID."""
    again = clients // 3 if reconnecting is None else reconnecting
    return asyncio.run(_load(url, uuid, run, server_pid, clients, steps, every, again, timeout))
