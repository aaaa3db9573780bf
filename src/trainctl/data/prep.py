"""`trainctl data prep NAME`: a data option's train and test files, in every format it lists.

The rows come from the hub (`datasets`), ModelScope, or a local copy (--from); generated datasets (arith) are
generated. Files are written where the option points (so `trainctl train data=NAME` finds them), all or none: every
split of every format goes to a staging folder inside it first, and is renamed into place once all are written (a
failure, a full disk among them, leaves the folder as it was).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from trainctl.data import arith
from trainctl.data.convert import Summary, Target, examples_from, write_formats
from trainctl.data.readers import DataError, Row
from trainctl.data.sources import HOLDOUT, PARSERS, hub_rows, local_rows, modelscope_files
from trainctl.data.writer import DiskFull

if TYPE_CHECKING:
    from trainctl.config.schema import Data

SOURCES = ("hf", "modelscope")


def data_option(name: str) -> Data:
    """The data option's resolved settings (a did-you-mean error for an unknown name)."""
    from trainctl.config.load import load

    return load([f"data={name}"]).cfg.data


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


def _split_rows(data: Data, split: str, from_: Path | None, source: str, limit: int | None) -> Iterator[Row] | None:
    """A split's rows, or None when the source has no such split."""
    src = data.source
    name = getattr(src.splits, split)
    if from_ is not None:
        return local_rows(from_, split, name or split)
    if not name:
        return None
    if source == "modelscope":
        if not src.modelscope:
            raise DataError(f"data={data.name} names no ModelScope dataset.", hint="--source hf, or --from PATH")
        return local_rows(modelscope_files(src.modelscope), split, name)
    if not src.hf:
        raise DataError(f"data={data.name} names no Hugging Face dataset.", hint="pass --from PATH")
    return hub_rows(src.hf, src.hf_config, name, limit)


def _rows(data: Data, split: str, from_: Path | None, source: str, limit: int | None) -> Iterator[Row]:
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
    if name == "env" and from_ is None:  # conf/data/env.yaml: an environment's rows (trainctl.envs), not a source's
        raise DataError(
            "data=env holds the rows of the run's environment: a plan generates them (once per setting of the "
            "environment); there is nothing to prepare by name.",
            hint="trainctl train recipe=grpo-arith-tiny-cpu env=reasoning_gym --dry-run   (generates them)",
        )
    data = data_option(name)
    target_dir = Path(out or data.dir).expanduser()
    # inside the target: the renames that publish the files stay on its filesystem (it may be a mount of its own)
    staging = target_dir / f".prep-{os.getpid()}"
    existed = target_dir.is_dir()
    shutil.rmtree(staging, ignore_errors=True)
    try:
        summary = _write(data, staging, from_, source, limit, progress)
        staged, summary.written = summary.written, {}
        for written, rows in staged.items():
            final = target_dir / Path(written).relative_to(staging)
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(written, final)
            summary.written[str(final)] = rows
    except DiskFull as e:
        raise DataError(
            f"data prep {name}: the disk filled up writing into {target_dir} ({e.free:,} bytes free there now); "
            f"nothing was written: {target_dir} is as it was.",
            hint=f"free some space there, or prepare it on another disk: trainctl data prep {name} --out DIR "
            "(and point data.dir there)",
        ) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if not existed:
            with contextlib.suppress(OSError):
                target_dir.rmdir()  # made for this prep, which wrote nothing (a folder with files stays)
    return summary


def _write(
    data: Data,
    target_dir: Path,
    from_: Path | None,
    source: str,
    limit: int | None,
    progress: Callable[[int], None] | None,
) -> Summary:
    summary = Summary()
    generate = data.source.generate
    if generate and generate.tool:
        return _prepare_tool_rows(data, target_dir, summary, limit)
    for split in ("train", "test"):
        targets = {
            fmt: (
                Target(
                    fmt=fmt,
                    data_source=data.data_source,
                    ability=data.ability or "math",
                    instruction=data.instruction,
                    split=split,
                ),
                target_dir / fmt / f"{split}.parquet",
            )
            for fmt in data.formats
        }
        if generate:
            items = arith.examples(split, getattr(generate, f"{split}_rows"), generate.seed)
        else:
            src = data.source
            rows = _rows(data, split, from_, source, limit)
            items = examples_from(rows, columns=src.columns, parser=PARSERS.get(src.parser or ""))
        write_formats(items, targets, summary, limit=limit, progress=progress)
    return summary


def _prepare_tool_rows(data: Data, target_dir: Path, summary: Summary, limit: int | None) -> Summary:
    """Generated rows that use a tool (arith-tools): rl rows for verl's tool agent loop, sft demonstrations."""
    from itertools import islice

    from trainctl.data.tools import arith_rows
    from trainctl.data.writer import write_rows

    generate = data.source.generate
    for split in ("train", "test"):
        n = getattr(generate, f"{split}_rows")
        for fmt in data.formats:
            if fmt not in ("rl", "sft"):
                raise DataError(f"data={data.name}: tool rows come in the rl and sft formats, not {fmt}.")
            out = target_dir / fmt / f"{split}.parquet"
            rows = arith_rows(f"tool_{fmt}", split, n, generate.seed)
            summary.written[str(out)] = write_rows(out, islice(rows, limit) if limit else rows)
    return summary
