"""Reading a user's data files row by row, in bounded memory: JSONL, JSON, CSV and parquet.

A malformed row is a DataError naming the file and line. Rows come with their location, so later errors can
name it too.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

from trainctl.errors import TrainctlError

SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv", ".parquet": "parquet"}


class DataError(TrainctlError):
    """A data file cannot be read or converted as it is."""


class Row:
    """One row and where it came from; `where` (file:line, file:row N, ...) is formatted only when asked for."""

    __slots__ = ("data", "n", "source", "unit")

    def __init__(self, data: dict, source: object, n: int, unit: str = ""):
        self.data, self.source, self.n, self.unit = data, source, n, unit

    @property
    def where(self) -> str:
        return f"{self.source}:{self.unit}{self.n}"


def file_kind(path: Path) -> str:
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise DataError(
            f"{path}: cannot tell the format from the suffix {path.suffix or '(none)'}.",
            hint="use .jsonl, .json, .csv or .parquet",
        )
    return kind


def _loads(raw: bytes) -> object:
    """orjson, and json for what orjson refuses but json reads (NaN, integers over 64 bits)."""
    import orjson

    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw.decode("utf-8-sig"))


def _jsonl(path: Path) -> Iterator[Row]:
    import orjson

    fast = orjson.loads
    with path.open("rb") as fh:
        for n, raw in enumerate(fh, 1):
            try:
                data = fast(raw)
            except orjson.JSONDecodeError:
                if not raw.strip():
                    continue
                try:
                    data = json.loads(raw.decode("utf-8-sig"))
                except (json.JSONDecodeError, UnicodeDecodeError) as e:
                    reason = (
                        f"{e.msg} at column {e.colno}"
                        if isinstance(e, json.JSONDecodeError)
                        else f"not UTF-8 at byte {e.start}"
                    )
                    raise DataError(
                        f"{path}:{n}: not valid JSON ({reason}).",
                        details=[f"  {raw[:120].decode('utf-8', errors='replace').rstrip()}"],
                        hint="fix or delete that line; every line of a .jsonl file is one JSON object",
                    ) from None
            if type(data) is not dict:
                raise DataError(f"{path}:{n}: a JSON {type(data).__name__}, not an object with columns.")
            yield Row(data, path, n)


def _json(path: Path) -> Iterator[Row]:
    try:
        data = _loads(path.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        if isinstance(e, UnicodeDecodeError):
            raise DataError(f"{path}: not UTF-8 (at byte {e.start}).") from None
        raise DataError(f"{path}:{e.lineno}: not valid JSON ({e.msg} at column {e.colno}).") from None
    if isinstance(data, dict):
        # {"data": [...]} or {"train": [...]}: one list of rows
        lists = [v for v in data.values() if isinstance(v, list)]
        if len(lists) != 1:
            raise DataError(f"{path}: a JSON object; expected a list of rows (or an object holding one list).")
        data = lists[0]
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of rows, found a {type(data).__name__}.")
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            raise DataError(f"{path}: item {i} is a {type(item).__name__}, not an object with columns.")
        yield Row(item, path, i, "item ")


def _csv(path: Path) -> Iterator[Row]:
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        for n, data in enumerate(reader, 2):
            if None in data:
                raise DataError(
                    f"{path}:{n}: more values than the header has columns.", hint="quote fields with commas"
                )
            yield Row(dict(data), path, n)


def _parquet(path: Path, batch_rows: int = 10_000) -> Iterator[Row]:
    import pyarrow.parquet as pq

    try:
        reader = pq.ParquetFile(path)
    except Exception as e:
        raise DataError(f"{path}: not a readable parquet file ({e}).") from None
    n = 0
    for batch in reader.iter_batches(batch_size=batch_rows):
        for data in batch.to_pylist():
            n += 1
            yield Row(data, path, n, "row ")


def read_rows(path: Path) -> Iterator[Row]:
    path = Path(path).expanduser()
    if not path.is_file():
        raise DataError(f"{path}: no such file.")
    return {"jsonl": _jsonl, "json": _json, "csv": _csv, "parquet": _parquet}[file_kind(path)](path)


def columns(path: Path, sample: int = 50) -> set[str]:
    """The columns of a file: from the parquet schema, or the union over its first rows."""
    path = Path(path).expanduser()
    if file_kind(path) == "parquet":
        import pyarrow.parquet as pq

        return set(pq.read_schema(path).names)
    seen: set[str] = set()
    for i, row in enumerate(read_rows(path)):
        seen |= set(row.data)
        if i + 1 >= sample:
            break
    return seen


def parquet_rows(path: str | None) -> int | None:
    """Rows in a parquet file, from its footer (no data read); None when there is no such file or it cannot be read.

    Kept in trainctl's cache per version of the file: every plan's batch checks ask, and importing pyarrow to read
    a footer costs ~0.1 s of the 0.3 s a config error is allowed.
    """
    from trainctl import paths

    if not path or paths.file_version(Path(path)) is None:
        return None
    return paths.memo_on_files("rows", [Path(path)], "num_rows", lambda: _footer_rows(Path(path).expanduser()))


def _footer_rows(path: Path) -> int | None:
    import pyarrow.parquet as pq

    try:
        return pq.read_metadata(path).num_rows
    except Exception:
        return None
