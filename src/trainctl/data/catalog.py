"""`trainctl data ls`: the datasets the data group knows, and what is prepared locally."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class Entry:
    name: str
    description: str
    formats: list[str]
    prepared: dict[str, dict[str, int | None]]  # format -> split -> rows (None: missing)
    size_bytes: int
    dir: str


def folder_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else 0


def catalog(search=None) -> list[Entry]:
    from trainctl.config.load import load
    from trainctl.config.search import SearchPath, describe
    from trainctl.data.readers import parquet_rows

    search = search or SearchPath.default()
    out = []
    for name, file in search.options("data").items():
        data = load([f"data={name}"], search).cfg.data
        base = Path(data.dir).expanduser()
        prepared = {
            fmt: {split: parquet_rows(str(base / fmt / f"{split}.parquet")) for split in ("train", "test")}
            for fmt in data.formats
        }
        out.append(Entry(name, describe(file), list(data.formats), prepared, folder_size(base), str(base)))
    return out
