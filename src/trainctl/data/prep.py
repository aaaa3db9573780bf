"""`trainctl data prep NAME`: a data option's train and test files, in every format it lists.

The rows come from the hub (`datasets`), ModelScope, or a local copy (--from); generated datasets (arith) are
generated. Files are written where the option points (so `trainctl train data=NAME` finds them), each one atomically.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from trainctl.data import arith
from trainctl.data.convert import Summary, Target, examples_from, write_formats
from trainctl.data.readers import DataError, Row
from trainctl.data.sources import HOLDOUT, PARSERS, hub_rows, local_rows, modelscope_files

SOURCES = ("hf", "modelscope")


def data_option(name: str) -> dict:
    """The data option's resolved settings (a did-you-mean error for an unknown name)."""
    from trainctl.plan import resolve

    return resolve([f"data={name}"]).tc["data"]


def _holdout(rows: Iterator[Row], keep_test: bool) -> Iterator[Row]:
    """Every HOLDOUT-th row goes to the test split (for sources that have none); the same rows every time.

    A source shorter than HOLDOUT would leave the test split empty (and verl without val_files), so there the
    last row is the test split: the train side holds each row back until it knows it is not the last.
    """
    held: Row | None = None
    count = 0
    for i, row in enumerate(rows):
        count = i + 1
        if held is not None:
            yield held
            held = None
        is_test = i % HOLDOUT == HOLDOUT - 1
        if keep_test and is_test:
            yield row
        elif not keep_test and not is_test:
            if count < HOLDOUT:
                held = row
            else:
                yield row
        last = row
    if 0 < count < HOLDOUT and keep_test:
        yield last
    # on the train side a short source's last row stays held: it is the test split


def _split_rows(data: dict, split: str, from_: Path | None, source: str, limit: int | None) -> Iterator[Row] | None:
    """A split's rows, or None when the source has no such split."""
    src = data.get("source") or {}
    name = (src.get("splits") or {}).get(split, split)
    if from_ is not None:
        return local_rows(from_, split, name)
    if not name:
        return None
    if source == "modelscope":
        if not src.get("modelscope"):
            raise DataError(f"data={data['name']} names no ModelScope dataset.", hint="--source hf, or --from PATH")
        return local_rows(modelscope_files(src["modelscope"]), split, name)
    if not src.get("hf"):
        raise DataError(f"data={data['name']} names no Hugging Face dataset.", hint="pass --from PATH")
    return hub_rows(src["hf"], src.get("hf_config"), name, limit)


def _rows(data: dict, split: str, from_: Path | None, source: str, limit: int | None) -> Iterator[Row]:
    has_test = split == "test" or _split_rows(data, "test", from_, source, limit) is not None
    rows = _split_rows(data, split, from_, source, limit) if has_test or split == "train" else None
    if split == "test" and rows is None:
        return _holdout(_split_rows(data, "train", from_, source, None), keep_test=True)
    if split == "train" and not has_test:
        return _holdout(rows, keep_test=False)
    return rows


def prepare(
    name: str,
    from_: Path | None = None,
    source: str = "hf",
    out: Path | None = None,
    limit: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> Summary:
    if source not in SOURCES:
        raise DataError(f"--source {source}: choose {' or '.join(SOURCES)}.")
    data = data_option(name)
    target_dir = Path(out or data["dir"]).expanduser()
    summary = Summary()
    generate = (data.get("source") or {}).get("generate")
    for split in ("train", "test"):
        targets = {
            fmt: (
                Target(
                    fmt=fmt,
                    data_source=data.get("data_source"),
                    ability=data.get("ability") or "math",
                    instruction=data.get("instruction"),
                    split=split,
                ),
                target_dir / fmt / f"{split}.parquet",
            )
            for fmt in data["formats"]
        }
        if generate:
            items = arith.examples(split, generate[f"{split}_rows"], generate["seed"])
        else:
            src = data.get("source") or {}
            rows = _rows(data, split, from_, source, limit)
            items = examples_from(rows, columns=src.get("columns"), parser=PARSERS.get(src.get("parser") or ""))
        write_formats(items, targets, summary, limit=limit, progress=progress)
    return summary
