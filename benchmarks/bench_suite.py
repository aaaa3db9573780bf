"""Issue 54: pytest's time for the default suite (`make test`'s), against 7cbd8d3's on the same host, in one run.

The suite's target is a time on a quiet 2-core machine, and hosts differ: the same checkout's suite took 11:39-12:11
on a quiet one and 21:42 on a busy one. So this runs 7cbd8d3's suite (a `git worktree` of it, made and removed here)
and this checkout's, alternately, BENCH_REPS times each (default 1: ~25 minutes a suite on a busy 2-core host), and
reports this checkout's time as it would be on the quiet machine: its time here divided by how much slower 7cbd8d3's
suite ran here than its quiet figure. Both run as `make test` runs them (the pytest options in pyproject.toml: two
workers), each with its own source first on PYTHONPATH, from this checkout's environment.

Only when named (`python benchmarks/run.py suite`, or BENCH_SUITE=1 with `make bench`): it takes most of an hour.
BENCH_SUITE_ARGS narrows both runs to some tests (e.g. a file, to try the benchmark itself), and then nothing is
compared with the quiet figure. BENCH_SUITE_BASELINE_PYTHON=/path/to/python3.11 runs 7cbd8d3's suite on that
interpreter (with this environment's packages): its quiet figure was measured on pyenv's 3.11.7, and `make install`
now prefers the system's (benchmarks/bench_interpreter.py), so that the ratio compares the checkouts as they run.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, VENV_BIN, Row, report, reps, venv_over_ours

BASELINE = "7cbd8d3"
# pytest's time for 7cbd8d3's suite on a quiet 2-core machine (11:39-12:11, 1556 passed): the middle
QUIET_BASELINE_S = 715.0
TARGET_S = 9 * 60
_SUMMARY = re.compile(r"(\d+) passed.* in ([\d.]+)s")


def wanted(argv: list[str]) -> bool:
    """Whether the suite benchmark was asked for: it runs for most of an hour."""
    return "suite" in argv or os.environ.get("BENCH_SUITE") == "1"


def pytest_seconds(
    checkout: Path, args: list[str], python: Path | None = None, failures_ok: bool = False
) -> tuple[float, int, float]:
    """(pytest's own time, tests passed, wall seconds) of the checkout's default suite, on `python` (else ours).
    failures_ok: a run with failed tests still counts (the baseline's learning tests are sampled: one missed its
    margin once in a run of this benchmark), and what failed is printed."""
    env = {
        **os.environ,
        "PYTHONPATH": str(checkout / "src"),
        # verifiers' interpreter, made by `make install` for this checkout (7cbd8d3 predates it and ignores it)
        "TRAINCTL_VERIFIERS_VENV": str(ROOT / ".venv-verifiers"),
    }
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(checkout / "src")], check=True, capture_output=True)
    start = time.perf_counter()
    done = subprocess.run(
        [str(python or VENV_BIN / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=checkout, env=env, capture_output=True, text=True,
    )  # fmt: skip
    wall = time.perf_counter() - start
    found = _SUMMARY.search(done.stdout.splitlines()[-1] if done.stdout.strip() else "")
    if found and done.returncode == 1 and failures_ok:
        failed = [line for line in done.stdout.splitlines() if line.startswith("FAILED ")]
        print(f"  {checkout}: {done.stdout.splitlines()[-1].strip('= ')}; timed all the same:", *failed, sep="\n    ")
    elif done.returncode != 0 or not found:
        raise RuntimeError(f"{checkout}'s suite exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    return float(found.group(2)), int(found.group(1)), wall


def _seconds(times: list[float]) -> str:
    return ", ".join(f"{t:.0f}" for t in times) + " s"


def main() -> list[Row]:
    if not wanted(sys.argv[1:]):
        print("\nsuite: not run (it takes most of an hour): `python benchmarks/run.py suite` runs it")
        return []
    args = shlex.split(os.environ.get("BENCH_SUITE_ARGS", ""))
    base = Path(tempfile.mkdtemp(prefix="bench-suite-")) / BASELINE
    subprocess.run(["git", "worktree", "add", "--detach", str(base), BASELINE], cwd=ROOT, check=True,
                   capture_output=True)  # fmt: skip
    other = os.environ.get("BENCH_SUITE_BASELINE_PYTHON")
    pythons = {"baseline": venv_over_ours(Path(other), base.parent) if other else None, "trainctl": None}
    times: dict[str, list[float]] = {"baseline": [], "trainctl": []}
    passed: dict[str, int] = {}
    try:
        for _ in range(reps(1)):
            for name, checkout in (("baseline", base), ("trainctl", ROOT)):
                seconds, passed[name], _ = pytest_seconds(checkout, args, pythons[name], name == "baseline")
                times[name].append(seconds)
                print(f"  {name} ({checkout}): pytest {seconds:.0f} s, {passed[name]} passed", flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, capture_output=True)
        shutil.rmtree(base.parent, ignore_errors=True)
    ours, theirs = statistics.median(times["trainctl"]), statistics.median(times["baseline"])
    runs = f"runs: {_seconds(times['trainctl'])} against {_seconds(times['baseline'])}"
    rows = [Row("pytest, default suite", ours, theirs, kind="speedup",
                note=f"{passed['trainctl']} passed against {passed['baseline']}; {runs}")]  # fmt: skip
    if not args:
        slower = theirs / QUIET_BASELINE_S
        quiet = ours / slower
        note = f"this host ran {BASELINE}'s suite {slower:.2f}x slower than its quiet {QUIET_BASELINE_S:.0f} s"
        rows.append(Row("the same on a quiet machine (estimated)", quiet, QUIET_BASELINE_S, target=f"<= {TARGET_S}s",
                        ok=quiet <= TARGET_S, note=note))  # fmt: skip
    report("suite", rows)
    return rows
