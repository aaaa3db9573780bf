"""Reading run folders as the server needs them: metrics by byte offset (so that a stream resumes where it left
off), the last lines of a growing file, and a run's summary from the end of its metrics instead of the whole file.

A line is read only once it ends with a newline: a metrics line cut mid-write waits for its end (or, at the end of
an interrupted run, is left out), exactly as trainctl.metrics.read_jsonl leaves it out.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import orjson

from trainctl.metrics import record
from trainctl.runs.keys import key_metrics

# at most this much of a file is read per call (a huge log never stalls the server)
CHUNK = 8 << 20
# how far back from the end the summary looks for the headline metric before reading the whole file
TAIL_BYTES = 256 << 10


def metric_files(run: Path) -> list[tuple[int, Path]]:
    """(attempt number, metrics file) in attempt order."""
    out = []
    for f in (Path(run) / "metrics").glob("attempt-*.jsonl"):
        try:
            out.append((int(f.stem.split("-", 1)[1]), f))
        except ValueError:
            continue
    return sorted(out)


def parse(line: bytes) -> tuple[int, dict] | None:
    try:
        return record(orjson.loads(line))
    except orjson.JSONDecodeError:
        return None


def read_lines(path: Path, start: int = 0, limit: int = CHUNK) -> tuple[list[bytes], int]:
    """The complete lines from byte `start` on, and the offset just past the last one (a partial last line is
    left for the next read). A file shorter than `start` (rewritten) is read from its beginning."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size < start:
                start = 0
            fh.seek(start)
            data = fh.read(limit)
    except OSError:
        return [], start
    cut = data.rfind(b"\n")
    if cut < 0:
        return [], start
    return data[:cut].split(b"\n"), start + cut + 1


def read_records(path: Path, start: int = 0) -> tuple[list[tuple[int, dict]], int]:
    """The metrics records from byte `start` on (every complete line), and the offset past them."""
    out: list[tuple[int, dict]] = []
    offset = start
    while True:
        lines, end = read_lines(path, offset)
        if end == offset:
            return out, offset
        out += [r for line in lines if line and (r := parse(line))]
        offset = end


@dataclass
class RunMetrics:
    steps: dict[int, dict]  # step -> metrics, merged over the attempts in order (a resumed attempt's steps win)
    attempt: int  # the last attempt with a metrics file (0: none)
    offset: int  # in that attempt's file: just past the last complete line read


def read_run_metrics(run: Path) -> RunMetrics:
    merged: dict[int, dict] = {}
    attempt, offset = 0, 0
    for n, f in metric_files(run):
        records, offset = read_records(f)
        attempt = n
        for step, data in records:
            merged.setdefault(step, {}).update(data)
    return RunMetrics(dict(sorted(merged.items())), attempt, offset)


def json_number(v):
    """A metric value as JSON has it: finite numbers as they are, NaN and infinities as null (verl's logger writes
    them as null already), anything else (a string metric) as it is."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def as_rows(steps: dict[int, dict], keys: list[str] | None = None, since: int | None = None) -> list[dict]:
    """The issue's shape: [{"step": N, "<metric>": value, ...}] (since: only steps after it)."""
    out = []
    for step, data in steps.items():
        if since is not None and step <= since:
            continue
        row = {"step": step}
        for k, v in data.items():
            if keys is None or k in keys:
                row[k] = json_number(v)
        out.append(row)
    return out


def as_columns(steps: dict[int, dict], keys: list[str] | None = None, since: int | None = None) -> dict:
    """{"steps": [...], "metrics": {name: [value or null per step]}}: what the charts draw, compact."""
    chosen = [s for s in steps if since is None or s > since]
    names: dict[str, None] = {}
    for s in chosen:
        for k, v in steps[s].items():
            if (keys is None or k in keys) and isinstance(v, int | float | None) and not isinstance(v, bool):
                names[k] = None
    metrics = {n: [json_number(steps[s].get(n)) for s in chosen] for n in sorted(names)}
    return {"steps": chosen, "metrics": metrics}


def last_lines(path: Path, n: int = 200, max_bytes: int = 256 << 10) -> tuple[list[str], int]:
    """The last `n` complete lines of a text file (from at most its last `max_bytes`) and the offset past them."""
    try:
        size = path.stat().st_size
    except OSError:
        return [], 0
    start = max(0, size - max_bytes)
    lines, end = read_lines(path, start, max_bytes)
    if start > 0 and lines:
        lines = lines[1:]  # the first one is cut
    return [decode_line(x) for x in lines[-n:]], end


def decode_line(line: bytes) -> str:
    from trainctl.runs.tail import ANSI

    text = line.decode("utf-8", errors="replace")
    # tqdm redraws with \r: the last drawing is what a terminal would show
    return ANSI.sub("", text.rstrip("\r").rsplit("\r", 1)[-1])


@dataclass
class Summary:
    steps_done: int = 0
    headline: tuple[str, float | None] | None = None
    last: dict | None = None  # the last step's metrics
    per_step: float | None = None  # the trainer's own seconds per step, where it logs them (verl's PPO family)


def _records_backwards(path: Path, want: int = TAIL_BYTES):
    """Records from the end of a metrics file backwards, reading more of it only when asked."""
    try:
        size = path.stat().st_size
    except OSError:
        return
    end = size
    carry = b""
    while end > 0:
        start = max(0, end - want)
        with open(path, "rb") as fh:
            fh.seek(start)
            data = fh.read(end - start) + carry
        lines = data.split(b"\n")
        carry = lines[0] if start > 0 else b""
        body = lines[1:] if start > 0 else lines
        for line in reversed(body):
            if line.strip() and (r := parse(line)):
                yield r
        end = start
        want = want * 4


def summary(run: Path, family: str | None) -> Summary:
    """Steps done, the headline metric's latest value and the last step's metrics, from the ends of the metrics
    files (the same answers as reading them whole: runs.status reads them whole)."""
    files = metric_files(run)
    out = Summary()
    if not files:
        return out
    from trainctl.runs.keys import headline

    lasts = []
    for _, f in files:
        merged: dict = {}
        step = None
        for s, data in _records_backwards(f):  # the last step's lines (training and validation: two lines)
            if step is not None and s != step:
                break
            step = s
            merged = {**data, **merged}
        if step is not None:
            lasts.append((step, merged))
    if not lasts:
        return out
    out.steps_done = max(s for s, _ in lasts)
    last_step = max(reversed(lasts), key=lambda r: r[0])  # a resumed attempt's wins
    out.last = dict(last_step[1])
    timing = out.last.get("timing_s/step")
    out.per_step = float(timing) if isinstance(timing, int | float) and timing > 0 else None
    key = headline(family)
    # the headline's latest value: the last attempt that logged it, from its end backwards
    for _, f in reversed(files):
        for _step, data in _records_backwards(f):
            name = key.pick(data)
            if name:
                value = data[name]
                out.headline = (name, value if isinstance(value, int | float) else None)
                return out
    return out


def key_values(family: str | None, data: dict) -> dict[str, float | None]:
    """The family's key metrics present in one step's metrics: trainer name -> value."""
    out = {}
    for km in key_metrics(family):
        name = km.pick(data)
        if name:
            v = data[name]
            out[name] = json_number(v) if isinstance(v, int | float) else None
    return out
