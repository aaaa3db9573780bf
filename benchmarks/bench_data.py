"""Issue 4: converting a 1,000,000-row question/answer JSONL to RL parquet.

trainctl: `trainctl data convert qa.jsonl --to rl --out FILE --data-source openai/gsm8k --instruction ...`.
Baseline: the same transformation written the way verl's example preprocessing scripts do it
(examples/data_preprocess/gsm8k.py): `datasets.load_dataset("json")`, `.map(process_fn, with_indices=True)`,
`.to_parquet()`, with a fresh datasets cache each run (the Arrow cache it builds is part of its cost).
Targets: at least 3x the baseline's rows/s; trainctl's peak RSS under 1 GB. Both outputs are compared row by row
(on a sample) so that the two really do the same work.
BENCH_ROWS changes the input size (default 1,000,000); BENCH_REPS the number of runs (default 3, interleaved).
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import tempfile
import textwrap
from pathlib import Path

from common import VENV_BIN, Row, report, reps, timed_rss

TRAINCTL = str(VENV_BIN / "trainctl")
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'

BASELINE = textwrap.dedent(
    '''
    """verl's examples/data_preprocess/gsm8k.py, reading a local JSONL."""
    import re
    import sys

    import datasets

    INSTRUCTION = sys.argv[3]


    def extract_solution(solution_str):
        solution = re.search("#### (\\\\-?[0-9\\\\.\\\\,]+)", solution_str)
        assert solution is not None
        final_solution = solution.group(0)
        final_solution = final_solution.split("#### ")[1].replace(",", "")
        return final_solution


    def make_map_fn(split):
        def process_fn(example, idx):
            question_raw = example.pop("question")
            question = question_raw + " " + INSTRUCTION
            answer_raw = example.pop("answer")
            solution = extract_solution(answer_raw)
            return {
                "data_source": "openai/gsm8k",
                "prompt": [{"role": "user", "content": question}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": solution},
                "extra_info": {"split": split, "index": idx, "answer": answer_raw, "question": question_raw},
            }

        return process_fn


    dataset = datasets.load_dataset("json", data_files=sys.argv[1], split="train")
    dataset = dataset.map(function=make_map_fn("train"), with_indices=True)
    dataset.to_parquet(sys.argv[2])
    '''
)


def write_input(path: Path, n: int) -> None:
    rng = random.Random(0)
    with path.open("w") as fh:
        for _ in range(n):
            a, b, c = rng.randint(1, 999), rng.randint(1, 999), rng.randint(1, 99)
            question = (
                f"A shop has {a} apples and buys {b} more crates of {c} apples each. How many apples does it have now?"
            )
            total = a + b * c
            answer = f"It buys {b} * {c} = <<{b}*{c}={b * c}>>{b * c} apples.\n{a} + {b * c} = {total}\n#### {total}"
            fh.write(json.dumps({"question": question, "answer": answer}) + "\n")


def same_rows(a: Path, b: Path, sample: int = 1000) -> bool:
    import pyarrow.parquet as pq

    ta, tb = pq.ParquetFile(a), pq.ParquetFile(b)
    if ta.metadata.num_rows != tb.metadata.num_rows:
        return False
    ra = next(ta.iter_batches(batch_size=sample)).to_pylist()
    rb = next(tb.iter_batches(batch_size=sample)).to_pylist()
    cols = ("data_source", "prompt", "ability", "reward_model", "extra_info")
    return all({c: x[c] for c in cols} == {c: y[c] for c in cols} for x, y in zip(ra, rb, strict=True))


def main() -> list[Row]:
    n_rows = int(os.environ.get("BENCH_ROWS", 1_000_000))
    n = reps(3)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        src = work / "qa.jsonl"
        write_input(src, n_rows)
        (work / "baseline.py").write_text(BASELINE)
        env = {**os.environ, "TRAINCTL_HOME": str(work / "home"), "TRAINCTL_CACHE": str(work / "cache")}
        commands = {
            "trainctl": lambda i: [
                TRAINCTL, "data", "convert", str(src), "--to", "rl", "--out", str(work / f"t{i}.parquet"),
                "--data-source", "openai/gsm8k", "--instruction", INSTRUCTION,
            ],
            "baseline": lambda i: [sys.executable, str(work / "baseline.py"), str(src), str(work / f"b{i}.parquet"),
                                   INSTRUCTION],
        }  # fmt: skip
        results: dict[str, list[tuple[float, float]]] = {k: [] for k in commands}
        for i in range(n):
            for name, argv in commands.items():
                run_env = {**env, "HF_DATASETS_CACHE": str(work / f"hf-cache-{name}-{i}")}
                results[name].append(timed_rss(argv(i), run_env, work))
                print(f"  {name} run {i + 1}: {results[name][-1][0]:.1f}s, {results[name][-1][1]:.0f} MiB", flush=True)
        identical = same_rows(work / "t0.parquet", work / "b0.parquet")
        input_mb = src.stat().st_size / 2**20

    wall = {k: statistics.median(w for w, _ in v) for k, v in results.items()}
    rss = {k: max(r for _, r in v) for k, v in results.items()}
    rate = {k: n_rows / wall[k] for k in wall}
    speedup = wall["baseline"] / wall["trainctl"]
    rows = [
        Row(
            f"convert {n_rows:,} rows to RL parquet",
            wall["trainctl"],
            wall["baseline"],
            target=">= 3x the baseline's rows/s",
            ok=speedup >= 3 and identical,
            note=f"{rate['trainctl']:,.0f} rows/s vs {rate['baseline']:,.0f} rows/s (median of {n}); "
            f"input {input_mb:.0f} MiB; outputs {'identical' if identical else 'DIFFER'} on a 1000-row sample",
        ),
        Row(
            "peak RSS (MiB)",
            rss["trainctl"],
            rss["baseline"],
            target="trainctl < 1024 MiB",
            ok=rss["trainctl"] < 1024,
            note="max over the runs, from GNU time -v",
            kind="overhead",
            unit="MiB",
        ),
    ]
    report("data", rows)
    return rows


if __name__ == "__main__":
    main()
