"""Reading files that another process is still writing: a run's log and its metrics JSONL."""

from __future__ import annotations

import json
import re
from pathlib import Path

# colours and cursor movement (Ray colours its prefixes; tqdm moves the cursor)
ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
# at most this much is read per call, so a huge log never stalls a refresh
CHUNK = 4 << 20


class LineTail:
    """The complete lines added to a text file since the last read; a partial last line waits for its end.
    A file that shrank (rewritten) is read again from its start."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.offset = 0
        self._pending = b""

    def read(self) -> list[str]:
        try:
            size = self.path.stat().st_size
        except OSError:
            return []
        if size < self.offset:
            self.offset, self._pending = 0, b""
        if size == self.offset:
            return []
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            data = fh.read(CHUNK)
        self.offset += len(data)
        data = self._pending + data
        # tqdm ends its updates with \r: each is a line of its own
        cut = max(data.rfind(b"\n"), data.rfind(b"\r"))
        if cut < 0:
            self._pending = data
            return []
        self._pending = data[cut + 1 :]
        text = data[: cut + 1].decode("utf-8", errors="replace")
        return [ANSI.sub("", line) for line in re.split(r"\r\n|\r|\n", text)[:-1]]


class JsonlTail:
    """The {"step": N, "data": {...}} records added to a metrics file since the last read."""

    def __init__(self, path: Path):
        self.lines = LineTail(path)

    @property
    def path(self) -> Path:
        return self.lines.path

    def read(self) -> list[tuple[int, dict]]:
        out = []
        for line in self.lines.read():
            try:
                rec = json.loads(line)
                step = int(rec["step"])
            except (ValueError, KeyError, TypeError):
                continue
            data = rec.get("data")
            if isinstance(data, dict):
                out.append((step, data))
        return out


# verl's console logger: "step:3 - train/loss:5.89 - train/lr:0.001 - ..." (a Ray job's metrics reach us only so)
_CONSOLE_STEP = re.compile(r"(?:^|\s)step:(\d+) - (.*)$")


def console_metrics(line: str) -> tuple[int, dict] | None:
    """A metrics record from one verl console-logger line, or None."""
    m = _CONSOLE_STEP.search(line)
    if not m:
        return None
    data: dict = {}
    for part in m.group(2).split(" - "):
        key, sep, value = part.rpartition(":")
        if not sep or not key:
            continue
        try:
            data[key.strip()] = float(value)
        except ValueError:
            continue
    return (int(m.group(1)), data) if data else None
