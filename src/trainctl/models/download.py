"""Downloading files over HTTP so that a download interrupted in one run resumes in the next.

huggingface_hub (since 1.31) downloads each file into a temporary name unique to the process and deletes it when
the download fails (huggingface/huggingface_hub#4196): an interrupted pull starts every unfinished file from zero.
trainctl keeps each unfinished file as `<folder>/.cache/trainctl/<path>.part` and asks for the rest with a Range
request; within a run it retries a dropped connection the same way.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

CHUNK = 1 << 20  # written (and so resumable) a MiB at a time
RETRIES = 5


class SizeMismatch(OSError):
    """The server sent the whole file, and it is not the size the listing gave: no retry will fix it."""

    def __init__(self, rel: str, got: int, listed: int):
        super().__init__(f"{rel}: the listing says {listed:,} bytes, the server sent {got:,}")
        self.rel, self.got, self.listed = rel, got, listed


@dataclass(frozen=True)
class Job:
    url: str
    dest: Path
    size: int
    rel: str  # the path in the repository, for messages


def part_path(target: Path, rel: str) -> Path:
    return target / ".cache" / "trainctl" / f"{rel}.part"


def fetch(
    client,
    job: Job,
    part: Path,
    headers: dict[str, str],
    raise_for_status: Callable,
    progress: Callable[[int], None] | None = None,
) -> None:
    """GET one file into `part` (resuming what is there), then move it to its place once it has every byte."""
    import httpx

    part.parent.mkdir(parents=True, exist_ok=True)
    advance = progress or (lambda n: None)
    have = part.stat().st_size if part.exists() else 0
    if have > job.size:
        part.unlink()
        have = 0
    advance(have)
    failures = 0
    while have < job.size:
        request_headers = dict(headers)
        if have:
            request_headers["Range"] = f"bytes={have}-"
        try:
            with client.stream("GET", job.url, headers=request_headers, follow_redirects=True) as r:
                if r.status_code == 416:  # the part is no longer a prefix of the file: start over
                    advance(-have)
                    part.unlink(missing_ok=True)
                    have = 0
                    continue
                raise_for_status(r)
                if have and r.status_code != 206:  # the server ignored the Range: it sends the whole file
                    advance(-have)
                    have = 0
                start = have
                declared = r.headers.get("Content-Length")
                with part.open("ab" if have else "wb") as fh:
                    for chunk in r.iter_bytes(CHUNK):
                        fh.write(chunk)
                        have += len(chunk)
                        advance(len(chunk))
                        failures = 0
                        if have > job.size:
                            raise SizeMismatch(job.rel, have, job.size)
            if have < job.size:
                if declared is not None and have - start == int(declared):
                    raise SizeMismatch(job.rel, have, job.size)
                raise httpx.RemoteProtocolError(f"{job.rel}: the connection ended at {have} of {job.size} bytes")
        except (httpx.TransportError, httpx.RemoteProtocolError):
            failures += 1
            if failures > RETRIES:
                raise
            time.sleep(min(2**failures, 10) / 10)
            have = part.stat().st_size if part.exists() else 0
    if have != job.size:
        raise OSError(f"{job.rel}: got {have} bytes, expected {job.size}")
    job.dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(part, job.dest)


def fetch_all(
    jobs: Iterable,
    run: Callable[[object, Callable[[int], None]], None],
    progress: Callable[[int], None] | None = None,
    workers: int = 8,
) -> None:
    """run(job, advance) for every job on a thread pool; the first failure is raised."""
    lock = threading.Lock()

    def advance(n: int) -> None:
        if progress:
            with lock:
                progress(n)

    jobs = list(jobs)
    if not jobs:
        return
    with ThreadPoolExecutor(max_workers=min(workers, len(jobs)), thread_name_prefix="pull") as pool:
        futures = [pool.submit(run, job, advance) for job in jobs]
        for future in as_completed(futures):
            error = future.exception()
            if error is not None:
                for other in futures:
                    other.cancel()
                raise error
