"""Issue 54: where the default suite's CPU goes, by kind of process, by command, by test file, by test, and by test
and kind of process together.

    python benchmarks/suite_cpu.py [PYTEST ARGS]     # no arguments: the default suite, with make test's options

The suite is bound by CPU on the 2-core machine (both cores ~98% busy, `-n 3` no faster): its time is its CPU-seconds
over two, so what to cut is what costs CPU, wherever it runs (a test's own worker, or the trainers, Ray workers,
engines and servers its commands start). This runs pytest once with a sampler beside it, which reads every process's
CPU time every SAMPLE_S seconds, and with this file as a plugin in each xdist worker, which logs when each test starts
and ends. A process's CPU between two samples is charged to the test running then on the worker it descends from,
and to its kind (from its command line). What it misses: processes that live less than a sample, and a process's
CPU after its last sample (a few percent in all).

The sampler reads /proc itself: psutil's process_iter took three times its CPU a sample (9.1 against 2.9 ms for 84
processes, measured here), and a busy moment of the suite has ~300.

Prints the five tables and writes them to benchmarks/results/suite_cpu.json. CPU-seconds scale with the host's speed:
compare figures from one host (benchmarks/README.md: the calibration loop).
"""

from __future__ import annotations

import bisect
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

SAMPLE_S = float(os.environ.get("SUITE_CPU_SAMPLE_S", "0.5"))
TIMELINE_VAR = "SUITE_CPU_TIMELINE"  # the folder each worker logs its tests' starts and ends to
# a process's kind: the first pattern its command line matches
KINDS = (
    ("pytest worker", r"-c import sys;exec\(eval\(sys\.stdin|pytest-xdist|-m pytest"),
    # and what starts one (Ray's setup_worker.py, or trainctl's stand-in for it and its fork server client)
    ("Ray worker", r"^ray::|setup_worker\.py|forkserver_setup\.py|forkserver_client\.py|default_worker\.py"),
    ("Ray daemon", r"ray/(dashboard|_private/log_monitor|_private/runtime_env|autoscaler)|gcs_server|raylet"),
    ("run driver, fork server", r"trainctl\.runtime\.forkserver"),
    ("verl SFT rank", r"verl\.trainer\.sft_trainer"),
    ("TRL rank", r"trainctl\.runtime\.trl_entry"),
    ("torchrun agent", r"torchrun|torch\.distributed\.run"),
    ("vLLM", r"vllm|VLLM::"),
    ("MCP server", r"trainctl/runtime/tools/|mcp"),
    ("verifiers", r"\.venv-verifiers"),
    ("trainctl command", r"-m trainctl( |$)|bin/trainctl "),
    ("Slurm", r"slurm|munge|srun"),
    ("browser", r"chrom|playwright"),
    ("other Python", r"python"),
    ("other", r""),
)
# command lines that change soon after a process starts: a fork of the run's fork server shows the server's until
# Ray names it, and a Ray worker is ray::IDLE until it hosts an actor
_PROVISIONAL = re.compile(r"^ray::IDLE|trainctl\.runtime\.forkserver|^$")


def kind(cmdline: str) -> str:
    return next(name for name, pattern in KINDS if re.search(pattern, cmdline))


def command(cmdline: str) -> str:
    """A command line with what differs from one start of it to the next (temporary paths, ports, PIDs, IDs) taken
    out, cut to 120 characters: the starts of one command add up."""
    cmdline = re.sub(r"/tmp/\S*", "<tmp>", cmdline)
    return re.sub(r"\d{3,}|[0-9a-f]{8,}", "N", cmdline)[:120]


# --- the pytest plugin (loaded in each worker by `-p suite_cpu`) ---


def _log(record: dict) -> None:
    folder = os.environ.get(TIMELINE_VAR)
    if folder:
        with open(os.path.join(folder, f"{os.getpid()}.jsonl"), "a") as f:
            # pytest's controller logs every test too (xdist hands it each report): only workers have an id
            worker = os.environ.get("PYTEST_XDIST_WORKER")
            f.write(json.dumps({"pid": os.getpid(), "t": time.time(), "worker": worker, **record}) + "\n")


def pytest_runtest_logstart(nodeid, location):
    _log({"start": nodeid})


def pytest_runtest_logfinish(nodeid, location):
    _log({"end": nodeid})


# --- the sampler ---


class Sampler(threading.Thread):
    """Every process's CPU-seconds (user + system) every SAMPLE_S, with its parent and command line."""

    def __init__(self):
        super().__init__(daemon=True)
        self.tick = os.sysconf("SC_CLK_TCK")
        self.samples: list[tuple[float, dict[int, float]]] = []
        self.parent: dict[int, int] = {}
        self.cmdline: dict[int, str] = {}
        self.stop = threading.Event()

    def _read(self, pid: int) -> float | None:
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            return None
        fields = stat[stat.rindex(")") + 2 :].split()
        if pid not in self.parent or _PROVISIONAL.search(self.cmdline.get(pid, "")):
            self.parent[pid] = int(fields[1])
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                cmdline = ""
            # a process that has ended but is not reaped yet reads as empty: it keeps the one it had
            self.cmdline[pid] = cmdline or self.cmdline.get(pid, "")
        return (int(fields[11]) + int(fields[12])) / self.tick

    def run(self):
        me = os.getpid()
        while not self.stop.is_set():
            now = time.time()
            cpu = {pid: c for pid in map(int, filter(str.isdigit, os.listdir("/proc"))) if pid != me
                   if (c := self._read(pid)) is not None}  # fmt: skip
            self.samples.append((now, cpu))
            self.stop.wait(SAMPLE_S)


# --- charging CPU to tests ---


def timelines(folder: Path) -> dict[int, list[tuple[float, float, str]]]:
    """Each worker's tests: (start, end, node id), in order."""
    out: dict[int, list[tuple[float, float, str]]] = {}
    for path in folder.glob("*.jsonl"):
        started: dict[str, float] = {}
        for line in path.read_text().splitlines():
            r = json.loads(line)
            if "start" in r:
                started[r["start"]] = r["t"]
            else:
                out.setdefault(r["pid"], []).append((started.pop(r["end"], r["t"]), r["t"], r["end"]))
    return {pid: sorted(tests) for pid, tests in out.items()}


def worker_pids(folder: Path) -> set[int]:
    return {r["pid"] for path in folder.glob("*.jsonl") for r in map(json.loads, path.read_text().splitlines())
            if r.get("worker")}  # fmt: skip


def worker_spans(tests: dict[int, list[tuple[float, float, str]]], start: float) -> dict[int, tuple]:
    """Each worker's test count, its first test's start and its last test's end (seconds after pytest started), and
    its last test: where one worker ends long before the other, one core idled for the difference."""
    return {
        pid: (len(ts), ts[0][0] - start, max(t[1] for t in ts) - start, max(ts, key=lambda t: t[1])[2])
        for pid, ts in sorted(tests.items())
        if ts
    }


def running(tests: list[tuple[float, float, str]], start: float, end: float) -> list[str]:
    """The tests of a worker that ran between start and end, with their seconds inside it (the longest 3)."""
    inside = sorted(
        ((min(e, end) - max(s, start), name) for s, e, name in tests if s < end and e > start), reverse=True
    )
    return [f"{name.split('::')[-1][:70]} {seconds:.0f}s" for seconds, name in inside[:3]]


def cpu_by_minute(sampler: Sampler, start: float) -> list[float]:
    """The cores busy (CPU-seconds sampled over 60 s), minute by minute: where the suite left a core idle."""
    minutes: list[float] = []
    before: dict[int, float] = dict(sampler.samples[0][1]) if sampler.samples else {}
    for t, cpu in sampler.samples[1:]:
        i = int((t - start) // 60)
        minutes += [0.0] * (i + 1 - len(minutes))
        for pid, seconds in cpu.items():
            minutes[i] += max(0.0, seconds - before.get(pid, 0.0)) / 60
            before[pid] = seconds
    if sampler.samples and minutes:  # the last minute is a part of one
        minutes[-1] *= 60 / max(SAMPLE_S, (sampler.samples[-1][0] - start) % 60)
    return minutes


def charge(sampler: Sampler, tests: dict[int, list[tuple[float, float, str]]]) -> dict[str, Counter]:
    """CPU-seconds by kind, by command, by test file, by test, and by test and kind together."""
    by = {"kind": Counter(), "command": Counter(), "file": Counter(), "test": Counter(), "test and kind": Counter()}
    starts = {pid: [t[0] for t in ts] for pid, ts in tests.items()}

    def worker(pid: int) -> int | None:
        for _ in range(64):
            if pid in tests or pid is None:
                return pid
            pid = sampler.parent.get(pid)
        return None

    def test_at(pid: int, t: float) -> str:
        i = bisect.bisect_right(starts[pid], t) - 1
        return tests[pid][i][2] if i >= 0 and t <= tests[pid][i][1] else "(between tests: collection, start-up)"

    before: dict[int, float] = dict(sampler.samples[0][1]) if sampler.samples else {}
    for t, cpu in sampler.samples[1:]:
        for pid, seconds in cpu.items():
            spent = seconds - before.get(pid, 0.0)
            before[pid] = seconds
            if spent <= 0:
                continue
            what = kind(sampler.cmdline.get(pid, ""))
            by["kind"][what] += spent
            by["command"][command(sampler.cmdline.get(pid, ""))] += spent
            w = worker(pid)
            test = test_at(w, t) if w is not None else "(outside the workers: pytest's controller, daemons)"
            by["test"][test] += spent
            by["file"][test.split("::")[0]] += spent
            by["test and kind"][f"{test} | {what}"] += spent
    return by


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="suite-cpu-") as folder:
        # this file is the workers' plugin (`-p suite_cpu`): its folder on their path
        path = os.pathsep.join(filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, TIMELINE_VAR: folder, "PYTHONPATH": path}
        sampler = Sampler()
        sampler.start()
        start = time.time()
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "suite_cpu", *argv], cwd=root, env=env)
        wall = time.time() - start
        sampler.stop.set()
        sampler.join()
        tests = timelines(Path(folder))
        by = charge(sampler, tests)
        workers = worker_pids(Path(folder))
    total = sum(by["kind"].values())
    print(f"\npytest exited {done.returncode} after {wall:.0f} s; {total:.0f} CPU-seconds sampled "
          f"({total / wall / os.cpu_count():.0%} of {os.cpu_count()} cores)")  # fmt: skip
    tests = {pid: ts for pid, ts in tests.items() if pid in workers}
    spans = worker_spans(tests, start)
    for pid, (n, first, last, final) in spans.items():
        print(f"worker {pid}: {n} tests from {first:.0f} s to {last:.0f} s; its last: {final}")
    minutes = cpu_by_minute(sampler, start)
    print("cores busy, minute by minute: " + " ".join(f"{busy:.1f}" for busy in minutes))
    for i, busy in enumerate(minutes):
        if busy < 0.75 * (os.cpu_count() or 1):  # a core idle for a quarter of the minute or more: what ran then
            during = {pid: running(ts, start + 60 * i, start + 60 * (i + 1)) for pid, ts in tests.items()}
            print(f"  minute {i} ({busy:.1f} busy): " + "; ".join(f"{pid}: {', '.join(names)}" for pid, names in
                                                                during.items() if names))  # fmt: skip
    shown = {"kind": 20, "command": 30, "file": 40, "test": 25, "test and kind": 25}
    for table, rows in by.items():
        print(f"\nCPU-seconds by {table}:")
        for name, seconds in rows.most_common(shown[table]):
            print(f"{seconds:8.1f}  {name}")
    results = root / "benchmarks" / "results"
    results.mkdir(exist_ok=True)
    record = {"wall_s": wall, "cpu_s": total, "exit": done.returncode, "workers": spans, "cores_busy": minutes}
    record.update({table: dict(rows.most_common()) for table, rows in by.items()})
    (results / "suite_cpu.json").write_text(json.dumps(record, indent=1))
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
