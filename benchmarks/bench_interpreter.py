"""Issue 54: what the interpreter .venv is made from costs, on the same packages.

`make install` makes .venv from the system's python3.11 where it can (Debian's and Ubuntu's are built with
profile-guided optimization and LTO) rather than the first python3.11 on PATH (pyenv builds without them unless asked).
This compares .venv's interpreter (trainctl column) with another CPython of the same minor version (baseline column):
BENCH_PYTHON_BASELINE=/path/to/python3.11, else the first python3.11 on PATH when it is another build. The baseline
runs .venv's own packages, through a virtual environment made here whose lib/ is a link to .venv's (removed after), so
that only the interpreter differs. Run by run interleaved, BENCH_REPS each (default 5), CPU seconds of the process and
its children (what the suite, bound by 2 cores' CPU, spends):

- the calibration loop (`s += i * i`, 20M times: pure Python);
- imports: torch, transformers' modeling code and trainctl's config loader, as every trainer and command pays;
- compositions: 12 configs (recipes, algorithms, hardware, LoRA) composed and validated in one process, each new;
- a tiny GRPO run (`recipe=grpo-arith-tiny-cpu run.max_steps=5`, every process of it), in a home where
  `model init tiny` and `data prep arith` ran once (BENCH_INTERPRETER_RUN=0 leaves it out: ~40 s a run).

Measured on the 2-core machine (a host 2.4x slower than quiet by the calibration loop; BENCH_REPS=5, farm-bench by
hand): Debian's 3.11.2 against pyenv's 3.11.7, a tiny GRPO run 36.7 against 42.6 CPU-s (0.84), compositions 1.06
against 1.37 s (0.77), imports 6.5 against 7.6 s (0.90).
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import Row, report, reps, venv_over_ours

CALIBRATION = "s = 0\nfor i in range(20_000_000):\n    s += i * i\n"
IMPORTS = "import torch, transformers.modeling_utils, trainctl.config.load\n"
COMPOSITIONS = """
import os, tempfile
root = tempfile.mkdtemp()
os.environ.update(TRAINCTL_CACHE=root + "/cache", TRAINCTL_HOME=root + "/home")
from trainctl.config.load import load
for words in (
    ["recipe=grpo-arith-tiny-cpu"], ["recipe=quickstart"], ["recipe=dpo-arith-tiny-cpu"], ["recipe=rm-arith-tiny-cpu"],
    ["recipe=agent-arith-tiny-cpu"], ["recipe=grpo-arith-tiny-cpu", "lora=r8"],
    ["algorithm=grpo", "model=qwen2.5-7b", "data=gsm8k", "hardware=8gpu"],
    ["algorithm=ppo", "model=tiny", "data=arith"], ["algorithm=rloo", "model=tiny", "data=arith"],
    ["algorithm=dapo", "model=tiny", "data=arith"], ["algorithm=gspo", "model=tiny", "data=arith"],
    ["algorithm=sft", "model=tiny", "data=arith", "lora=r8"],
):
    load(words)
import shutil
shutil.rmtree(root)
"""


def _baseline() -> Path | None:
    """The other interpreter: BENCH_PYTHON_BASELINE, else python3.11 on PATH when it is not .venv's."""
    named = os.environ.get("BENCH_PYTHON_BASELINE") or shutil.which("python3.11") or ""
    if not named:
        return None
    # the interpreter itself, not a launcher in front of it (pyenv's shims are shell scripts)
    asked = subprocess.run(
        [named, "-c", "import sys; print(getattr(sys, '_base_executable', sys.executable))"],
        capture_output=True, text=True,
    )  # fmt: skip
    if asked.returncode != 0:
        return None
    found = Path(asked.stdout.strip()).resolve()
    return None if found == Path(sys._base_executable).resolve() else found


def _version(python: Path) -> str:
    return subprocess.run(
        [str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


def _cpu(argv: list[str], cwd: Path, env: dict) -> float:
    """CPU seconds (user + system) of one command and every process it waited for."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])}... exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> list[Row]:
    ours = Path(sys.executable)
    base = _baseline()
    n = reps(5)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="bench-interpreter-") as tmp:
        root = Path(tmp)
        theirs = None
        if base is not None and _version(base) == _version(ours):
            theirs = venv_over_ours(base, root)
        work = root / "work"
        work.mkdir()
        env = {
            **os.environ, "TRAINCTL_HOME": str(root / "home"), "TRAINCTL_CACHE": str(root / "cache"),
            "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline",
        }  # fmt: skip
        for setup in (["model", "init", "tiny"], ["data", "prep", "arith"]):
            subprocess.run([str(ours), "-m", "trainctl", *setup], cwd=work, env=env, check=True, capture_output=True)
        commands = {
            "calibration loop (20M)": ["-c", CALIBRATION],
            "imports: torch, transformers, trainctl's config": ["-c", IMPORTS],
            "12 compositions, each new": ["-c", COMPOSITIONS],
        }
        if os.environ.get("BENCH_INTERPRETER_RUN", "1") != "0":
            commands["tiny GRPO run, 5 steps (CPU-s)"] = [
                "-m", "trainctl", "train", "recipe=grpo-arith-tiny-cpu", "run.max_steps=5", "logger=console",
            ]  # fmt: skip
        for name, args in commands.items():
            times: dict[str, list[float]] = {"ours": [], "theirs": []}
            for i in range(n + 1):  # the first of each: a warm-up, not counted
                for who, python in (("ours", ours), ("theirs", theirs)):
                    if python is None:
                        continue
                    shutil.rmtree(work / "runs", ignore_errors=True)
                    spent = _cpu([str(python), *args], work, env)
                    if i:
                        times[who].append(spent)
                time.sleep(0.1)
            rows.append(
                Row(
                    name, statistics.median(times["ours"]),
                    statistics.median(times["theirs"]) if times["theirs"] else None,
                    note="" if theirs else "no other python3.11 to compare with (BENCH_PYTHON_BASELINE)",
                )
            )  # fmt: skip
    rows[0].note = rows[0].note or f".venv: {sys.version.split()[0]} at {Path(sys._base_executable).resolve()}; " + (
        f"baseline: {base}" if theirs else "no baseline"
    )
    report("interpreter", rows)
    return rows


if __name__ == "__main__":
    main()
