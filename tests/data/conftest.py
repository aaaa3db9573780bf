"""Input files in every shape a user brings, written by the tests."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

QA = [
    {"question": "What is 2 + 3?", "answer": "2 + 3 = 5\n#### 5"},
    {"question": "What is 7 * 6?", "answer": "7 * 6 = 42\n#### 42"},
    {"question": "What is 10 - 4?", "answer": "10 - 4 = 6\n#### 6"},
]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.fixture
def shapes(tmp_path) -> dict[str, Path]:
    """One small file per input shape (and per file type)."""
    d = tmp_path / "inputs"
    d.mkdir()
    files = {
        "question_answer": write_jsonl(d / "qa.jsonl", QA),
        "messages": write_jsonl(
            d / "chat.jsonl",
            [
                {
                    "messages": [
                        {"role": "user", "content": r["question"]},
                        {"role": "assistant", "content": r["answer"]},
                    ]
                }
                for r in QA
            ],
        ),
        "prompt_response": write_parquet(
            d / "pr.parquet", [{"prompt": r["question"], "response": r["answer"]} for r in QA]
        ),
        "alpaca": d / "alpaca.json",
        "sharegpt": write_jsonl(
            d / "sharegpt.jsonl",
            [
                {"conversations": [{"from": "human", "value": r["question"]}, {"from": "gpt", "value": r["answer"]}]}
                for r in QA
            ],
        ),
        "preference": d / "pairs.csv",
    }
    files["alpaca"].write_text(
        json.dumps([{"instruction": r["question"], "input": "", "output": r["answer"]} for r in QA])
    )
    with files["preference"].open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["prompt", "chosen", "rejected"])
        w.writeheader()
        for r in QA:
            w.writerow({"prompt": r["question"], "chosen": r["answer"], "rejected": "I do not know."})
    return files
