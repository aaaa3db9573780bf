"""Timing helpers for the benchmarks: interleaved runs, medians, a result table."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
RESULTS = Path(__file__).resolve().parent / "results"


def baseline_src(variable: str = "BENCH_BASELINE_SRC") -> Path | None:
    """The baseline checkout's source folder that `variable` names, its modules compiled to bytecode first: with
    PYTHONDONTWRITEBYTECODE set (this machine and CI set it) a checkout `git worktree add` made has none, and every
    command would compile trainctl's modules anew (`make install` compiles ours): measured, `config validate` 0.85 s
    against 0.59 s and `--help` 0.22 s against 0.17 s for the same code."""
    src = os.environ.get(variable)
    if not src:
        return None
    subprocess.run([sys.executable, "-m", "compileall", "-q", src], check=True, capture_output=True)
    return Path(src).resolve()


def venv_over_ours(python: Path, root: Path) -> Path:
    """A virtual environment at root/venv of another interpreter, `python`, whose packages are this one's (its lib/ a
    link to ours): the python to run, for comparing interpreters on the same packages."""
    venv = root / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(python)
    (venv / "lib").symlink_to(Path(sys.prefix) / "lib", target_is_directory=True)
    (venv / "pyvenv.cfg").write_text(f"home = {python.parent}\ninclude-system-site-packages = false\n")
    # the console scripts (trainctl, ray, torchrun, ...) too, started by the other interpreter: a test that runs
    # `<venv>/bin/trainctl` or Ray's CLI finds them there
    ours = Path(sys.prefix) / "bin"
    for script in ours.iterdir():
        target = venv / "bin" / script.name
        if script.name.startswith(("python", "activate")) or target.exists():
            continue
        head = script.read_bytes()[:256] if script.is_file() else b""
        if head.startswith(b"#!") and str(ours).encode() in head.split(b"\n", 1)[0]:
            body = script.read_text().split("\n", 1)
            target.write_text(f"#!{venv / 'bin' / 'python'}\n{body[1] if len(body) > 1 else ''}")
            target.chmod(0o755)
        else:
            target.symlink_to(script)
    return venv / "bin" / "python"


def reps(default: int = 5) -> int:
    return int(os.environ.get("BENCH_REPS", default))


@dataclass
class Row:
    name: str
    trainctl_s: float
    baseline_s: float | None = None
    target: str = ""
    ok: bool | None = None
    note: str = ""
    # "speedup": baseline / trainctl (how much faster trainctl is); "overhead": trainctl / baseline
    kind: str = "speedup"
    # what trainctl_s and baseline_s measure (seconds unless said otherwise)
    unit: str = "s"

    @property
    def ratio(self) -> float | None:
        if self.baseline_s is None or not self.trainctl_s:
            return None
        return self.baseline_s / self.trainctl_s if self.kind == "speedup" else self.trainctl_s / self.baseline_s


def run_once(argv: list[str], env: dict[str, str], cwd: Path, expect: int | None = None) -> float:
    t = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - t
    if expect is not None and proc.returncode != expect:
        raise RuntimeError(f"{argv[:4]}... exited {proc.returncode}, expected {expect}:\n{proc.stderr[-2000:]}")
    return elapsed


def interleaved(commands: dict[str, tuple], env, cwd, n: int) -> dict[str, float]:
    """Median wall time of each command, run alternately n times each (after one warm-up run each). A command is
    (argv, expected exit code) or (argv, expected exit code, its own environment)."""
    for argv, expect, *own in commands.values():
        run_once(argv, own[0] if own else env, cwd, expect)
    times: dict[str, list[float]] = {k: [] for k in commands}
    for _ in range(n):
        for name, (argv, expect, *own) in commands.items():
            times[name].append(run_once(argv, own[0] if own else env, cwd, expect))
    return {k: statistics.median(v) for k, v in times.items()}


def report(bench: str, rows: list[Row]) -> None:
    RESULTS.mkdir(exist_ok=True)
    payload = [dict(asdict(r), ratio=r.ratio) for r in rows]
    (RESULTS / f"{bench}.json").write_text(json.dumps(payload, indent=2))
    width = max(len(r.name) for r in rows)
    print(f"\n{bench}")
    print(f"  {'measurement':<{width}}  {'trainctl':>9}  {'baseline':>9}  {'ratio':>7}  target")
    for r in rows:
        unit = "s" if r.unit == "s" else ""
        base = f"{r.baseline_s:8.2f}{unit}" if r.baseline_s is not None else f"{'-':>9}"
        ratio = f"{r.ratio:6.3f}x" if r.ratio is not None else f"{'-':>7}"
        mark = "" if r.ok is None else ("  ok" if r.ok else "  MISSED")
        print(f"  {r.name:<{width}}  {r.trainctl_s:8.2f}{unit}  {base}  {ratio}  {r.target}{mark}")
        if r.note:
            print(f"  {'':<{width}}  {r.note}")


def timed_rss(argv: list[str], env: dict, cwd: Path) -> tuple[float, float]:
    """(wall seconds, peak RSS in MiB) of one command, measured by GNU time -v."""
    t = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-v", *argv], env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:4]} failed:\n{proc.stdout[-1500:]}\n{proc.stderr[-1500:]}")
    line = next(ln for ln in proc.stderr.splitlines() if "Maximum resident set size" in ln)
    return wall, int(line.rsplit(":", 1)[1]) / 1024
