"""A run's live stream (Server-Sent Events): new metrics rows, log lines, status and progress changes, alerts.

Each event's id is the stream's cursor, `ATTEMPT.METRICS_OFFSET.LOG_OFFSET`: the byte offsets in the attempt's
metrics file and log just past what was sent. A browser that reconnects sends it back (Last-Event-ID) and the
stream goes on from there: nothing is sent twice and nothing is skipped. The run page reads the history once
(/api/jobs/{uuid}/metrics, which says its cursor) and opens the stream at that cursor; history is never re-sent.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

from trainctl.launch.rundir import RUN_FILE
from trainctl.runs.progress import Progress
from trainctl.serve.reading import (
    as_columns,
    decode_line,
    last_lines,
    metric_files,
    read_lines,
    read_records,
)

# how often files are looked at while the run is alive, and after it ended (a resume starts a new attempt)
POLL_ALIVE = 0.1
POLL_IDLE = 1.0
# how often the status is re-read while the run is alive (its supervisor's PID, the launcher's answer)
STATUS_EVERY = 1.0
PING_EVERY = 15.0
LOG_TAIL_LINES = 200
# the log backlog read to rebuild the alerts and the total step count when a stream starts
LOG_BACKLOG_BYTES = 4 << 20
# the steps read into the progress (ETA, alerts) when a stream starts
BACKLOG_STEPS = 200


@dataclass
class Cursor:
    attempt: int = 0
    metrics: int = 0
    log: int | None = None  # None: not sent yet (a fresh page gets the log's last lines first)

    def __str__(self) -> str:
        return f"{self.attempt}.{self.metrics}.{'-' if self.log is None else self.log}"

    @classmethod
    def parse(cls, text: str | None) -> Cursor | None:
        if not text:
            return None
        try:
            a, m, lg = text.strip().split(".")
            return cls(int(a), int(m), None if lg == "-" else int(lg))
        except ValueError:
            return None


def event(kind: str, data, cursor: Cursor | None = None) -> str:
    head = f"id: {cursor}\n" if cursor is not None else ""
    return f"{head}event: {kind}\ndata: {json.dumps(data, separators=(',', ':'), allow_nan=False, default=str)}\n\n"


# run.json as last parsed, per run: every stream of a run reads it each poll; a stat says whether it changed
_STATUS: dict[Path, tuple[tuple, dict]] = {}


def _status(path: Path) -> dict:
    """A run's run.json (read only: shared by every stream of the run)."""
    f = path / RUN_FILE
    try:
        st = os.stat(f)
        sig = (st.st_ino, st.st_size, st.st_mtime_ns)
        cached = _STATUS.get(path)
        if cached is not None and cached[0] == sig:
            return cached[1]
        raw = json.loads(f.read_bytes())
    except (OSError, ValueError):
        return {}
    if len(_STATUS) > 1000:
        _STATUS.clear()
    _STATUS[path] = (sig, raw)
    return raw


def _attempt(raw: dict, n: int) -> dict:
    return next((a for a in raw.get("attempts") or [] if a.get("n") == n), {})


def _log_path(path: Path, raw: dict, n: int) -> Path:
    return path / (_attempt(raw, n).get("log") or f"logs/attempt-{n}.log")


def _metrics_path(path: Path, raw: dict, n: int) -> Path:
    return path / (_attempt(raw, n).get("metrics") or f"metrics/attempt-{n}.jsonl")


def _last_attempt(path: Path, raw: dict) -> int:
    attempts = [a.get("n", 0) for a in raw.get("attempts") or []]
    files = [n for n, _ in metric_files(path)]
    return max([0, *attempts, *files])


class RunStream:
    """One client's stream of one run."""

    def __init__(
        self,
        path: Path,
        status: Callable[[], dict],
        cursor: Cursor | None,
        resumed: bool,
        waiting: Callable[[], bool] | None = None,
    ):
        self.path = path
        self.status = status  # the run's row as the API shows it (status, detail, steps), read fresh
        self.resumed = resumed
        # a job created and not started: true while it waits (its run folder is not there yet, and is not gone)
        self.waiting = waiting
        raw = _status(path)
        self.family = raw.get("family")
        self.cursor = cursor or Cursor(_last_attempt(path, raw), 0, None)
        self.progress = self._progress(raw)
        self.last_status: dict | None = None

    def _progress(self, raw: dict) -> Progress:
        """The live view's progress (ETA, alerts), caught up silently with what the client already has."""
        n = self.cursor.attempt
        attempt = _attempt(raw, n)
        started = attempt.get("started")
        from trainctl.runs.status import parse_time

        when = parse_time(started)
        p = Progress(self.family, total=attempt.get("steps_total"), started=when.timestamp() if when else time.time())
        p.console_source = not metric_files(self.path)
        records = []
        for m, f in metric_files(self.path):
            if m < n:
                records += read_records(f)[0]
        if n:
            records += _read_until(_metrics_path(self.path, raw, n), self.cursor.metrics)[0]
        # the alerts look back over the whole history at each step: the recent steps are enough to catch up
        p.add_metrics(records[-BACKLOG_STEPS:], backlog=True)
        if n:
            log = _log_path(self.path, raw, n)
            end = self.cursor.log if self.cursor.log is not None else _size(log)
            start = max(0, end - LOG_BACKLOG_BYTES)
            lines, _ = read_lines(log, start, end - start)
            for line in lines[1 if start else 0 :]:
                p.add_line(decode_line(line), backlog=True)
        return p

    def _progress_data(self) -> dict:
        p = self.progress
        row = self.last_status or {}
        total = p.total or row.get("steps_total")
        per = p.seconds_per_step()
        eta = max(0, total - p.done) * per if per is not None and total else None
        return {
            "steps_done": max(p.done, row.get("steps_done") or 0),
            "steps_total": total,
            "seconds_per_step": per,
            "eta_seconds": eta if row.get("status") in ("running", None) else None,
        }

    async def events(self, disconnected: Callable[[], asyncio.Future]) -> AsyncIterator[str]:
        yield "retry: 1000\n\n"
        if not self.resumed:
            for a in self.progress.alerts:
                yield event("alert", _alert(a))
        last_ping = last_status_check = 0.0
        while True:
            if await disconnected():
                return
            now = time.monotonic()
            if not (self.path / RUN_FILE).is_file():
                if self.waiting is None or not self.waiting():
                    yield event("gone", {"message": f"the run folder {self.path.name} is gone"}, self.cursor)
                    return
                if self.last_status is None:  # created, not started: its status, then the run once it starts
                    self.last_status = self.status()
                    yield event("status", _compact(self.last_status), self.cursor)
                if now - last_ping >= PING_EVERY:
                    last_ping = now
                    yield ": ping\n\n"
                last_status_check = 0.0  # read at once when it starts
                await asyncio.sleep(POLL_ALIVE)
                continue
            raw = None
            if now - last_status_check >= (STATUS_EVERY if self._alive() else POLL_IDLE) or self.last_status is None:
                last_status_check = now
                raw = _status(self.path)
                for chunk in self._switch_attempt(raw):
                    yield chunk
                row = self.status()
                compact = _compact(row)
                if compact != (self.last_status and _compact(self.last_status)):
                    self.last_status = row
                    yield event("status", compact, self.cursor)
                    yield event("progress", self._progress_data(), self.cursor)
                self.last_status = row
            raw = raw or _status(self.path)
            sent = False
            for chunk in self._new_metrics(raw):
                sent = True
                yield chunk
            for chunk in self._new_log(raw):
                sent = True
                yield chunk
            if sent:
                yield event("progress", self._progress_data(), self.cursor)
            if now - last_ping >= PING_EVERY:
                last_ping = now
                yield ": ping\n\n"
            await asyncio.sleep(POLL_ALIVE if self._alive() else POLL_IDLE)

    def _alive(self) -> bool:
        return bool(self.last_status and self.last_status.get("status") in ("running", "queued"))

    def _switch_attempt(self, raw: dict):
        """A new attempt (a resume): the rest of the old one's metrics, then the new one from its start."""
        latest = _last_attempt(self.path, raw)
        if latest <= self.cursor.attempt:
            return
        yield from self._new_metrics(raw)
        first = not self.cursor.attempt
        self.cursor = Cursor(latest, 0, 0)
        attempt = _attempt(raw, latest)
        if first:  # a job that started while streamed: its family and clock are known now
            self.family = raw.get("family")
            self.progress = self._progress(raw)
        self.progress.total = attempt.get("steps_total") or self.progress.total
        yield event("attempt", {"n": latest, "started": attempt.get("started")}, self.cursor)

    def _new_metrics(self, raw: dict):
        if not self.cursor.attempt:
            return
        f = _metrics_path(self.path, raw, self.cursor.attempt)
        if _size(f) == self.cursor.metrics:  # nothing new (a stat, where reading opens the file)
            return
        records, end = read_records(f, self.cursor.metrics)
        if end == self.cursor.metrics:
            return
        self.cursor.metrics = end
        before = len(self.progress.alerts)
        self.progress.add_metrics(records)
        merged: dict[int, dict] = {}
        for step, data in records:
            merged.setdefault(step, {}).update(data)
        yield event("metrics", as_columns(merged), self.cursor)
        for a in self.progress.alerts[before:]:
            yield event("alert", _alert(a), self.cursor)

    def _new_log(self, raw: dict):
        if not self.cursor.attempt:
            return
        log = _log_path(self.path, raw, self.cursor.attempt)
        if self.cursor.log is None:  # a fresh page: the log's last lines first
            lines, end = last_lines(log, LOG_TAIL_LINES)
            self.cursor.log = end
            if lines:
                yield event("log", {"lines": lines, "tail": True}, self.cursor)
            return
        if _size(log) == self.cursor.log:
            return
        raw_lines, end = read_lines(log, self.cursor.log)
        if end == self.cursor.log:
            return
        self.cursor.log = end
        lines = [decode_line(x) for x in raw_lines]
        before = len(self.progress.alerts)
        for line in lines:
            self.progress.add_line(line)
        yield event("log", {"lines": lines[-2000:]}, self.cursor)
        for a in self.progress.alerts[before:]:
            yield event("alert", _alert(a), self.cursor)


def _compact(row: dict) -> dict:
    return {k: row.get(k) for k in ("status", "detail", "exit_code", "steps_total", "attempts")}


def _alert(a) -> dict:
    return {"kind": a.kind, "message": a.message, "hint": a.hint, "step": a.step}


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_until(path: Path, end: int) -> tuple[list, int]:
    """The records in the first `end` bytes of a metrics file."""
    from trainctl.serve.reading import parse

    lines, stop = read_lines(path, 0, end)
    return [r for line in lines if line and (r := parse(line))], stop
