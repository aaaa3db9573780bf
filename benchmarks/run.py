"""Run the benchmarks: `python benchmarks/run.py [NAME ...]` (NAME: config, ...; default: all)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main(argv: list[str]) -> int:
    names = argv or sorted(p.stem.removeprefix("bench_") for p in HERE.glob("bench_*.py"))
    missed = 0
    for name in names:
        rows = importlib.import_module(f"bench_{name}").main()
        missed += sum(1 for r in rows if r.ok is False)
    print(f"\n{missed} target(s) missed" if missed else "\nall targets met")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
