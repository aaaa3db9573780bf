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
        out += _parse_lines([line for line in lines if line.strip()])
        offset = end


def _parse_lines(lines: list[bytes]) -> list[tuple[int, dict]]:
    """Many lines at once: one orjson call for the whole batch (a 10k-step history in a few milliseconds), line by
    line only when one of them is not JSON (a line cut by a crash in the middle of a file)."""
    try:
        recs = orjson.loads(b"[" + b",".join(lines) + b"]")
    except orjson.JSONDecodeError:
        return [r for line in lines if (r := parse(line))]
    out = []
    for rec in recs:
        data = rec.get("data") if isinstance(rec, dict) else None
        if isinstance(data, dict) and isinstance(rec.get("step"), int):
            out.append((rec["step"], data))  # verl's file-logger format: the common case, without the general path
        elif (r := record(rec)) is not None:
            out.append(r)
    return out


@dataclass
class RunMetrics:
    steps: dict[int, dict]  # step -> metrics, merged over the attempts in order (a resumed attempt's steps win)
    attempt: int  # the last attempt with a metrics file (0: none)
    offset: int  # in that attempt's file: just past the last complete line read


def read_run_metrics(run: Path) -> RunMetrics:
    merged: dict[int, dict] = {}
    attempt, offset = 0, 0
    for n, f in metric_files(run):
        lines, offset = [], 0
        while True:  # the whole file, in chunks
            more, end = read_lines(f, offset)
            if end == offset:
                break
            lines += more
            offset = end
        attempt = n
        steps = _by_step([line for line in lines if line.strip()])
        if not merged:
            merged = steps
            continue
        for step, data in steps.items():  # a resumed attempt's steps win
            merged.setdefault(step, {}).update(data)
    return RunMetrics(dict(sorted(merged.items())), attempt, offset)


def _by_step(lines: list[bytes]) -> dict[int, dict]:
    """step -> metrics of one file's lines (a later line's values win). verl's {"step", "data"} lines take a fast
    path: one orjson call for them all; any other line (ART's flat records, a line cut by a crash) the general one."""
    out: dict[int, dict] = {}
    try:
        for rec in orjson.loads(b"[" + b",".join(lines) + b"]"):
            data, step = rec["data"], rec["step"]
            if type(data) is not dict or type(step) is not int:
                raise TypeError
            cur = out.get(step)
            if cur is None:
                out[step] = data
            else:
                cur.update(data)
        return out
    except (orjson.JSONDecodeError, KeyError, TypeError):
        out = {}
    for step, data in (r for line in lines if (r := parse(line))):
        out.setdefault(step, {}).update(data)
    return out


def json_number(v):
    """A metric value as JSON has it: finite numbers as they are, NaN and infinities as null (verl's logger writes
    them as null already), anything else (a string metric) as it is."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def as_rows(steps: dict[int, dict], keys: list[str] | None = None, since: int | None = None) -> list[dict]:
    """The issue's shape: [{"step": N, "<metric>": value, ...}] (since: only steps after it). NaN and infinities
    become null when the answer is written (orjson)."""
    chosen = steps.items() if since is None else ((s, d) for s, d in steps.items() if s > since)
    if keys is None:
        return [{"step": s, **d} for s, d in chosen]
    wanted = set(keys)
    return [{"step": s, **{k: v for k, v in d.items() if k in wanted}} for s, d in chosen]


def as_columns(steps: dict[int, dict], keys: list[str] | None = None, since: int | None = None) -> dict:
    """{"steps": [...], "metrics": {name: [value or null per step]}}: what the charts draw, compact (numeric
    metrics only; NaN and infinities become null when written)."""
    chosen = [s for s in steps if since is None or s > since]
    datas = [steps[s] for s in chosen]
    names: dict[str, None] = {}
    for d in datas:
        names.update(dict.fromkeys(d))
    metrics = {}
    for n in sorted(names):
        if keys is not None and n not in keys:
            continue
        values = [d.get(n) for d in datas]
        first = next((v for v in values if v is not None), None)
        if isinstance(first, int | float) and not isinstance(first, bool):
            metrics[n] = values
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
    for km in key_metrics(family, data):
        name = km.pick(data)
        if name:
            v = data[name]
            out[name] = json_number(v) if isinstance(v, int | float) else None
    return out
