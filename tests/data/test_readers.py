"""Row counts of parquet files, kept in the cache per file version."""

from __future__ import annotations

import json
import os
import time

from tests.data.conftest import write_parquet
from trainctl.data.readers import parquet_rows


def _entries(cache) -> list:
    return sorted((cache / "rows").iterdir()) if (cache / "rows").is_dir() else []


def _settle(path, seconds: float = -60) -> None:
    """The file's time moved: long before now (settled), or after now (as written this very tick)."""
    when = time.time() + seconds
    os.utime(path, (when, when))


def test_a_row_count_is_cached_per_file_version_and_a_damaged_entry_counted_again(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("TRAINCTL_CACHE", str(cache))
    path = write_parquet(tmp_path / "train.parquet", [{"x": i} for i in range(5)])
    _settle(path, +60)
    assert parquet_rows(str(path)) == 5
    assert _entries(cache) == []  # a file written this very tick may be rewritten within it, keeping its time
    _settle(path)
    assert parquet_rows(str(path)) == 5
    (entry,) = _entries(cache)
    assert json.loads(entry.read_text()) == {"answer": 5}

    entry.write_text('{"answer": 7}')  # read back, not counted again: the footer is not opened
    assert parquet_rows(str(path)) == 7

    entry.write_text("\x00garbage")
    assert parquet_rows(str(path)) == 5
    assert json.loads(entry.read_text()) == {"answer": 5}

    write_parquet(path, [{"x": i} for i in range(9)])  # another version of the file: another entry
    _settle(path)
    assert parquet_rows(str(path)) == 9
    assert len(_entries(cache)) == 2


def test_no_count_for_a_missing_or_unreadable_file(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("TRAINCTL_CACHE", str(cache))
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet at all")
    _settle(bad)
    assert parquet_rows(None) is None
    assert parquet_rows(str(tmp_path / "absent.parquet")) is None
    assert parquet_rows(str(tmp_path)) is None
    assert parquet_rows(str(bad)) is None
    assert _entries(cache) == []
