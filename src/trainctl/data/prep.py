"""Preparing datasets: the files a data group option points at, in each format it lists."""

from __future__ import annotations

from pathlib import Path

from trainctl.data import arith
from trainctl.data.writer import write_rows
from trainctl.errors import TrainctlError


def data_option(name: str) -> dict:
    from trainctl.plan import make_plan

    return make_plan([f"data={name}"], native=False).tc["data"]


def prepare(name: str, out: Path | None = None) -> list[str]:
    data = data_option(name)
    target = Path(out or data["dir"]).expanduser()
    generate = (data.get("source") or {}).get("generate")
    if not generate:
        raise TrainctlError(f"data={name} is read from a hub, which this build cannot prepare yet.")
    lines = []
    for fmt in data["formats"]:
        for split, rows in (("train", generate["train_rows"]), ("test", generate["test_rows"])):
            path = target / fmt / f"{split}.parquet"
            n = write_rows(path, arith.rows(fmt, split, rows, generate["seed"]))
            lines.append(f"wrote {n} rows to {path}")
    return lines
