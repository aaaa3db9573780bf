"""`trainctl serve` over 200 synthetic runs of 10,000 steps each: the runs table, one run's whole history, the
live stream's latency, the server's memory and idle CPU; the same data through TensorBoard, as a ratio. Then the
stream under load (BENCH_SSE_CLIENTS clients, default 500, on one run writing BENCH_SSE_STEPS steps, a third of the
clients reconnecting midway with Last-Event-ID: tests/serve/sse_load.py, which tests/serve/test_events.py runs
smaller), and a job's plan through POST /api/jobs, the planner cold and warm.

The runs are written once to $BENCH_SERVE_DIR (default: a folder under the system's temp dir) and reused. Each has
the files a real run has (run.json, trainctl.yaml, metrics/attempt-1.jsonl with an SFT run's metrics per step);
one more run is "running" (supervised by a `sleep` of ours) and gets lines appended for the stream's latency.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil

from common import Row, report

RUNS = int(os.environ.get("BENCH_SERVE_RUNS", 200))
STEPS = int(os.environ.get("BENCH_SERVE_STEPS", 10_000))
BASE = Path(os.environ.get("BENCH_SERVE_DIR", Path(tempfile.gettempdir()) / "trainctl-bench-serve"))
SAMPLES = 15
SSE_CLIENTS = int(os.environ.get("BENCH_SSE_CLIENTS", 500))
SSE_STEPS = int(os.environ.get("BENCH_SSE_STEPS", 100))
ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_runs(root: Path) -> None:
    marker = root / f".made-{RUNS}x{STEPS}"
    if marker.is_file():
        return
    root.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    for i in range(RUNS):
        run = root / f"run-{i:03d}"
        (run / "metrics").mkdir(parents=True, exist_ok=True)
        (run / "logs").mkdir(exist_ok=True)
        started = time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(1_790_000_000 + i * 3600))
        status = {
            "name": run.name, "algorithm": "sft", "family": "sft", "backend": "verl-sft",
            "config_file": "verl_sft.yaml", "model": "tiny", "data": "arith", "args": ["recipe=quickstart"],
            "created": started, "state": "finished",
            "attempts": [{"n": 1, "started": started, "launcher": "local", "log": "logs/attempt-1.log",
                          "metrics": "metrics/attempt-1.jsonl", "steps_total": STEPS, "ended": started,
                          "exit_code": 0, "state": "finished", "seconds": 3600.0}],
        }  # fmt: skip
        (run / "run.json").write_text(json.dumps(status, indent=2))
        (run / "trainctl.yaml").write_text("algorithm:\n  name: sft\nmodel:\n  name: tiny\ndata:\n  name: arith\n")
        (run / "logs" / "attempt-1.log").write_text(f"Total steps: {STEPS}\n")
        loss = 6.0
        with open(run / "metrics" / "attempt-1.jsonl", "w") as out:
            for step in range(1, STEPS + 1):
                loss = max(0.05, loss * 0.9995 + rng.uniform(-0.01, 0.01))
                data = {"train/loss": round(loss, 6), "train/grad_norm": round(rng.uniform(0.5, 2), 5),
                        "train/lr": 1e-5, "train/global_tokens": 8192, "perf/cpu_memory_used_gb": 2.5}  # fmt: skip
                out.write(json.dumps({"step": step, "data": data}) + "\n")
    marker.write_text("ok\n")


def make_live(root: Path) -> tuple[Path, subprocess.Popen]:
    """A run that says it runs, supervised by a process of ours."""
    run = root / "live"
    (run / "metrics").mkdir(parents=True, exist_ok=True)
    (run / "logs").mkdir(exist_ok=True)
    proc = subprocess.Popen(["sleep", "3600"], start_new_session=True)
    status = {
        "name": "live", "algorithm": "sft", "family": "sft", "backend": "verl-sft", "model": "tiny",
        "data": "arith", "args": [], "created": "2026-01-01T00:00:00+0000", "state": "running",
        "attempts": [{"n": 1, "started": time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime()), "launcher": "local",
                      "log": "logs/attempt-1.log", "metrics": "metrics/attempt-1.jsonl", "steps_total": 1000}],
        "live": {"pid": proc.pid, "pid_started": psutil.Process(proc.pid).create_time(), "trainer_pid": None,
                 "host": socket.gethostname(), "heartbeat": time.time()},
    }  # fmt: skip
    (run / "run.json").write_text(json.dumps(status))
    (run / "metrics" / "attempt-1.jsonl").write_text("")
    (run / "logs" / "attempt-1.log").write_text("")
    return run, proc


def start_server(root: Path, *args: str) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainctl", "serve", "--runs", str(root), "--port", str(port), *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=root.parent,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(url + "/login", timeout=1)
            return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError("the server did not start")


def timed(client: httpx.Client, path: str) -> tuple[float, httpx.Response]:
    t = time.perf_counter()
    r = client.get(path)
    r.read()
    elapsed = time.perf_counter() - t
    r.raise_for_status()
    return elapsed, r


def median_of(client, path: str, n: int = SAMPLES) -> float:
    return statistics.median(timed(client, path)[0] for _ in range(n))


def sse_latency(url: str, run: Path, n: int = 20) -> list[float]:
    from trainctl.serve.store import run_uuid

    arrived: list[float] = []
    got = threading.Event()
    ready = threading.Event()

    def listen():
        with httpx.Client(timeout=None) as c, c.stream("GET", f"{url}/api/jobs/{run_uuid(run)}/events") as r:
            kind = None
            for line in r.iter_lines():
                if line.startswith("event: "):
                    kind = line[7:]
                    if kind == "status":
                        ready.set()
                elif line.startswith("data: ") and kind == "metrics":
                    arrived.append(time.perf_counter())
                    got.set()
                if len(arrived) >= n:
                    return

    threading.Thread(target=listen, daemon=True).start()
    ready.wait(30)
    time.sleep(0.5)
    latencies = []
    metrics = run / "metrics" / "attempt-1.jsonl"
    for step in range(1, n + 1):
        got.clear()
        time.sleep(random.uniform(0.2, 0.4))  # not in step with the server's polling
        with open(metrics, "a") as out:
            written = time.perf_counter()
            out.write(json.dumps({"step": step, "data": {"train/loss": 1.0 / step}}) + "\n")
        if not got.wait(10):
            raise RuntimeError("a metrics line was not streamed within 10 s")
        latencies.append(arrived[-1] - written)
    return latencies


def idle_cpu(proc: psutil.Process, seconds: float = 10.0) -> float:
    before = proc.cpu_times()
    time.sleep(seconds)
    after = proc.cpu_times()
    return 100.0 * ((after.user - before.user) + (after.system - before.system)) / seconds


def tensorboard_ratio(root: Path, ours_table: float, ours_run: float) -> list[Row]:
    """The same runs' train/loss as TensorBoard event files, through `tensorboard --logdir` (if it is installed)."""
    try:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError:
        return [Row("tensorboard", 0.0, note="TensorBoard is not installed here: no comparison")]
    tb = root.parent / "tensorboard"
    marker = tb / f".made-{RUNS}x{STEPS}"
    if not marker.is_file():
        for run in sorted(p for p in root.iterdir() if p.name.startswith("run-")):
            writer = EventFileWriter(str(tb / run.name))
            for line in (run / "metrics" / "attempt-1.jsonl").read_text().splitlines():
                rec = json.loads(line)
                value = summary_pb2.Summary.Value(tag="train/loss", simple_value=rec["data"]["train/loss"])
                writer.add_event(event_pb2.Event(step=rec["step"], wall_time=0.0,
                                                 summary=summary_pb2.Summary(value=[value])))  # fmt: skip
            writer.close()
        marker.write_text("ok\n")
    port = _free_port()
    tb_bin = Path(sys.executable).parent / "tensorboard"
    proc = subprocess.Popen(
        [str(tb_bin), "--logdir", str(tb), "--port", str(port), "--host", "127.0.0.1",
         f"--samples_per_plugin=scalars={STEPS}", "--reload_interval=0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        t0 = time.perf_counter()
        with httpx.Client(base_url=url, timeout=120) as c:
            while True:  # until every run is loaded with every step
                try:
                    runs = c.get("/data/runs").json()
                    if len(runs) >= RUNS:
                        data = c.get("/data/plugin/scalars/scalars", params={"run": runs[-1], "tag": "train/loss"})
                        if data.status_code == 200 and len(data.json()) >= STEPS:
                            break
                except (httpx.HTTPError, ValueError):
                    pass
                if time.perf_counter() - t0 > 900:
                    raise RuntimeError("TensorBoard did not load the runs in 15 min")
                time.sleep(0.5)
            loaded = time.perf_counter() - t0
            table = median_of(c, "/data/runs")
            one = median_of(c, f"/data/plugin/scalars/scalars?run={runs[0]}&tag=train/loss")
        rss = psutil.Process(proc.pid).memory_info().rss / 2**20
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    return [
        Row("tensorboard: runs list", ours_table, table, note=f"TensorBoard's /data/runs (names only; loaded all in "
            f"{loaded:.0f} s, RSS {rss:.0f} MB)"),
        Row("tensorboard: one run's metric", ours_run, one,
            note="TensorBoard's scalars for one tag (trainctl: every metric of the run)"),
    ]  # fmt: skip


def sse_load() -> list[Row]:
    """SSE_CLIENTS streams of one run while it writes SSE_STEPS steps (20 a second), a third reconnecting."""
    import shutil

    sys.path.insert(0, str(ROOT))
    from tests.serve.sse_load import live_run, load

    from trainctl.serve.store import run_uuid

    root = BASE / "sse" / "runs"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    sleeper = live_run(root / "live")
    proc, url = start_server(root)
    try:
        cpu0 = psutil.Process(proc.pid).cpu_times()
        res = load(url, run_uuid(root / "live"), root / "live", proc.pid, SSE_CLIENTS, SSE_STEPS, every=0.05,
                   timeout=600)  # fmt: skip
        cpu1 = psutil.Process(proc.pid).cpu_times()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
        sleeper.kill()
        sleeper.wait()
    problems = res.problems(SSE_STEPS)
    lat = res.latencies()
    p99 = statistics.quantiles(lat, n=100)[98]
    first = max(c.first_event for c in res.clients if c.first_event is not None)
    cpu = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
    verdict = f"{len(problems)} clients WRONG: {problems[:3]}" if problems else "every client saw every step once"
    note = f"{res.figures()}; server CPU {cpu:.1f} s; {verdict}"
    return [
        Row(f"SSE: {SSE_CLIENTS} clients' first event (slowest)", first, target="<= 2 s",
            ok=first <= 2 and not problems, note=note),
        Row(f"SSE: step latency p99, {SSE_CLIENTS} clients", p99, target="<= 1 s", ok=p99 <= 1),
        Row(f"SSE: server RSS, {SSE_CLIENTS} clients (MB)", res.rss_mb, target="<= 150 MB", ok=res.rss_mb <= 150,
            unit="MB"),
    ]  # fmt: skip


def planning() -> list[Row]:
    """POST /api/jobs (a plan: composed, checked by verl itself) with the server's planner cold, then warm."""
    import shutil

    root = BASE / "plan" / "runs"
    shutil.rmtree(root.parent, ignore_errors=True)
    root.mkdir(parents=True)
    proc, url = start_server(root, "--allow-actions")
    times = []
    try:
        with httpx.Client(base_url=url, timeout=600) as c:
            for i in range(1 + SAMPLES // 3):
                t = time.perf_counter()
                job = {"name": f"plan-{i}", "recipe": "quickstart", "learning_rate": 1e-3 * (i + 1)}
                r = c.post("/api/jobs", json=job)
                times.append(time.perf_counter() - t)
                r.raise_for_status()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    warm = statistics.median(times[1:])
    return [
        Row(
            "POST /api/jobs (plan), warm planner",
            warm,
            target="<= 2 s",
            ok=warm <= 2,
            note=f"the first (the planner imports verl) {times[0]:.1f} s; {len(times) - 1} warm plans",
        )
    ]


def main() -> list[Row]:
    root = BASE / "runs"
    t = time.perf_counter()
    make_runs(root)
    made = time.perf_counter() - t
    live, sleeper = make_live(root)
    proc, url = start_server(root)
    server = psutil.Process(proc.pid)
    rows: list[Row] = []
    try:
        with httpx.Client(base_url=url, timeout=120) as c:
            cold, r = timed(c, "/")
            assert r.text.count("<tr data-uuid") == RUNS + 1, "the runs table is not whole"
            table = median_of(c, "/")
            api = median_of(c, "/api/jobs")
            uid = next(row["uuid"] for row in c.get("/api/jobs").json() if row["name"] == "run-000")
            one_cold, r = timed(c, f"/api/jobs/{uid}/metrics")
            assert len(r.json()) == STEPS
            one = median_of(c, f"/api/jobs/{uid}/metrics")
            cols = median_of(c, f"/api/jobs/{uid}/metrics?format=columns")
            latencies = sse_latency(url, live)
            rss = server.memory_info().rss / 2**20
            cpu = idle_cpu(server)
        rows += [
            Row("runs table (/, 200 runs), warm", table, target="<= 0.3 s", ok=table <= 0.3,
                note=f"first load after start {cold:.2f} s; GET /api/jobs {api * 1000:.0f} ms; "
                f"{RUNS} runs x {STEPS} steps (written in {made:.0f} s)"),
            Row("one run's 10k-step metrics", one, target="<= 0.2 s", ok=one <= 0.2,
                note=f"rows format; first read {one_cold:.2f} s; ?format=columns {cols * 1000:.0f} ms"),
            Row("SSE latency, median", statistics.median(latencies), target="<= 0.2 s",
                ok=statistics.median(latencies) <= 0.2,
                note=f"line written -> event received, {len(latencies)} lines; max {max(latencies) * 1000:.0f} ms"),
            Row("server RSS (MB)", rss, target="<= 150 MB", ok=rss <= 150, unit="MB"),
            Row("idle CPU (%)", cpu, target="<= 1%", ok=cpu <= 1.0, unit="%", note="no client, 10 s"),
        ]  # fmt: skip
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
        sleeper.kill()
        sleeper.wait()
    rows += tensorboard_ratio(root, rows[0].trainctl_s, rows[1].trainctl_s)
    rows += sse_load()
    rows += planning()
    report("serve", rows)
    return rows


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
