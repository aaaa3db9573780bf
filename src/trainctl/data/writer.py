"""Writing parquet files so that a reader never sees half of one: write to a temporary name, then rename."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


class ParquetWriter:
    """Rows in, one parquet file out, in batches (memory stays bounded); the file appears only on close()."""

    def __init__(self, path: Path, batch_rows: int = 10_000):
        self.path = Path(path)
        self.tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        self.batch_rows = batch_rows
        self._rows: list[dict] = []
        self._writer = None
        self.count = 0

    def write(self, row: dict) -> None:
        self._rows.append(row)
        if len(self._rows) >= self.batch_rows:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not self._rows:
            return
        table = pa.Table.from_pylist(self._rows, schema=self._writer.schema if self._writer else None)
        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(self.tmp, table.schema)
        self._writer.write_table(table)
        self.count += len(self._rows)
        self._rows = []

    def close(self) -> Path:
        self._flush()
        if self._writer is None:
            raise ValueError(f"no rows to write to {self.path}")
        self._writer.close()
        os.replace(self.tmp, self.path)
        return self.path

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self.tmp.unlink(missing_ok=True)

    def __enter__(self) -> ParquetWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_rows(path: Path, rows: Iterable[dict]) -> int:
    with ParquetWriter(path) as w:
        for row in rows:
            w.write(row)
    return w.count
