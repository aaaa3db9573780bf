"""Writing parquet files so that a reader never sees half of one: write to a temporary name, then rename. A disk that
fills up (or a quota) is a DiskFull error naming the file; the temporary file goes."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from trainctl.data.readers import DataError

# what a write that found no room fails with: the disk full, a quota reached
FULL = (errno.ENOSPC, errno.EDQUOT)


class DiskFull(DataError):
    """The disk (or the user's quota) had no room left for a file being written."""

    def __init__(self, path: Path):
        self.path = path
        probe = path.parent
        while not probe.exists():
            probe = probe.parent
        self.free = shutil.disk_usage(probe).free
        super().__init__(
            f"the disk filled up writing {path} ({self.free:,} bytes free there now).",
            hint=f"free some space on the disk that holds {probe}, or write somewhere else",
        )


def disk_full(e: BaseException) -> bool:
    return isinstance(e, OSError) and e.errno in FULL


class ParquetWriter:
    """Rows in, one parquet file out, in batches (memory stays bounded); the file appears only on close().

    Encoding and compressing a batch (pyarrow, without the GIL) runs on a background thread while the caller
    builds the next one; at most one batch is in flight.
    """

    def __init__(self, path: Path, batch_rows: int = 10_000):
        self.path = Path(path)
        self.tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        self.batch_rows = batch_rows
        self._rows: list[dict] = []
        self._writer = None
        self._pool = None
        self._pending = None
        self.count = 0

    def _flush(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not self._rows:
            return
        table = pa.Table.from_pylist(self._rows, schema=self._writer.schema if self._writer else None)
        if self._writer is None:
            from concurrent.futures import ThreadPoolExecutor

            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(self.tmp, table.schema)
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="parquet-writer")
        self._wait()
        self._pending = self._pool.submit(self._writer.write_table, table)
        self.count += len(self._rows)
        self._rows = []

    def _wait(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()

    def _stop(self) -> None:
        try:
            self._wait()
        finally:
            if self._pool is not None:
                self._pool.shutdown()
            if self._writer is not None:
                self._writer.close()

    def write(self, row: dict) -> None:
        self._rows.append(row)
        if len(self._rows) >= self.batch_rows:
            self._guarded(self._flush)

    def _guarded(self, step) -> None:
        """A step that writes: a full disk is DiskFull (pyarrow raises OSError with errno ENOSPC)."""
        try:
            step()
        except OSError as e:
            if disk_full(e):
                raise DiskFull(self.path) from e
            raise

    def close(self) -> Path:
        """The rows written whole to their file; on any failure, no file (not even the temporary one)."""
        try:
            try:
                self._guarded(self._flush)
                if self._writer is None:
                    raise ValueError(f"no rows to write to {self.path}")
            finally:
                self._guarded(self._stop)
        except BaseException:
            self.tmp.unlink(missing_ok=True)
            raise
        os.replace(self.tmp, self.path)
        return self.path

    def abort(self) -> None:
        # already failing: the caller's error is the one to report
        with contextlib.suppress(Exception):
            self._stop()
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
