"""Ray Jobs: submitting a run to a cluster's Jobs API, following it, listing and stopping jobs.

A job's working_dir is a small staging folder holding only the backend config (never model weights or a
virtualenv); environment variables, secrets included, travel in the runtime_env and are never written to disk
by trainctl.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from trainctl.errors import TrainctlError
from trainctl.secrets import Redactor

TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
# how long a submission waits for a freshly started cluster's job agent
AGENT_WAIT_SECONDS = 90


def _client(address: str):
    from ray.job_submission import JobSubmissionClient

    if not address:
        raise TrainctlError(
            "no Ray cluster address.",
            hint="export RAY_ADDRESS=http://HEAD_IP:8265, set hardware.ray_address, or pass --address",
        )
    if "://" not in address:
        address = f"http://{address}"
    try:
        return JobSubmissionClient(address)
    except Exception as e:  # the client connects on construction
        raise TrainctlError(
            f"cannot reach the Ray Jobs API at {address}: {str(e).splitlines()[0]}",
            hint="check that the cluster's dashboard is running (`ray start --head --dashboard-host 0.0.0.0`) "
            "and the address is the dashboard's (port 8265)",
        ) from None


@dataclass
class JobInfo:
    job_id: str
    status: str
    entrypoint: str
    start: float | None
    end: float | None
    message: str
    run: str | None


def _info(details) -> JobInfo:
    meta = details.metadata or {}
    return JobInfo(
        job_id=details.submission_id or details.job_id or "",
        status=str(details.status.value if hasattr(details.status, "value") else details.status),
        entrypoint=details.entrypoint,
        start=(details.start_time or 0) / 1000 or None,
        end=(details.end_time or 0) / 1000 or None,
        message=details.message or "",
        run=meta.get("trainctl_run"),
    )


def list_jobs(address: str) -> list[JobInfo]:
    return sorted((_info(d) for d in _client(address).list_jobs()), key=lambda j: j.start or 0, reverse=True)


def job_status(address: str, job_id: str) -> JobInfo:
    client = _client(address)
    try:
        return _info(client.get_job_info(job_id))
    except RuntimeError as e:
        raise TrainctlError(f"no job {job_id!r} on {address}.", hint="list them: trainctl jobs ls") from e


def job_logs(address: str, job_id: str) -> str:
    job_status(address, job_id)
    return _client(address).get_job_logs(job_id)


def stop_job(address: str, job_id: str, wait: float = 30.0) -> JobInfo:
    client = _client(address)
    job_status(address, job_id)
    client.stop_job(job_id)
    deadline = time.monotonic() + wait
    info = job_status(address, job_id)
    while info.status not in TERMINAL and time.monotonic() < deadline:
        time.sleep(0.5)
        info = job_status(address, job_id)
    return info


def submit(
    address: str,
    entrypoint: str,
    staged_files: dict[str, Path],
    env_vars: dict[str, str],
    run_name: str,
) -> str:
    """Submit a job whose working dir holds only `staged_files` (name -> source); returns the job id."""
    client = _client(address)
    staging = Path(tempfile.mkdtemp(prefix="trainctl-job-"))
    try:
        for name, source in staged_files.items():
            shutil.copy2(source, staging / name)
        job_id = f"trainctl-{run_name}-{time.strftime('%Y%m%d-%H%M%S')}"
        deadline = time.monotonic() + AGENT_WAIT_SECONDS
        while True:
            try:
                return client.submit_job(
                    entrypoint=entrypoint,
                    submission_id=job_id,
                    runtime_env={"working_dir": str(staging), "env_vars": env_vars},
                    metadata={"trainctl_run": run_name},
                )
            except RuntimeError as e:
                # a cluster that just started answers before its job agent is up
                if "No available agent" not in str(e) or time.monotonic() > deadline:
                    raise TrainctlError(
                        f"the cluster at {address} refused the job: {str(e).splitlines()[0]}",
                        hint="check the cluster with: trainctl doctor hardware.ray_address=" + address,
                    ) from None
                time.sleep(2)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def follow(
    address: str,
    job_id: str,
    echo: TextIO,
    log_path: Path | None,
    env: dict[str, str],
    on_tick: Callable[[], None] | None = None,
) -> JobInfo:
    """Stream a job's logs until it ends; Ctrl-C stops the job. Returns its final state. `on_tick()` is called a few
    times a second meanwhile (the run folder's heartbeat)."""
    client = _client(address)
    redact = Redactor(env)
    interrupted = threading.Event()

    def on_signal(signum, frame):
        interrupted.set()

    handlers = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            handlers[sig] = signal.signal(sig, on_signal)

    async def tail() -> None:
        with open(log_path or os.devnull, "a", encoding="utf-8") as log:
            async for chunk in client.tail_job_logs(job_id):
                text = redact.text(chunk)
                echo.write(text)
                echo.flush()
                log.write(text)
                log.flush()

    async def main() -> None:
        task = asyncio.ensure_future(tail())
        while not task.done():
            if interrupted.is_set():
                client.stop_job(job_id)
                break
            if on_tick is not None:
                with contextlib.suppress(OSError, ValueError):
                    on_tick()
            await asyncio.sleep(0.2)
        try:
            await asyncio.wait_for(task, timeout=30)
        except TimeoutError:
            task.cancel()

    try:
        asyncio.run(main())
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    info = job_status(address, job_id)
    deadline = time.monotonic() + 60
    while info.status not in TERMINAL and time.monotonic() < deadline:
        time.sleep(0.5)
        info = job_status(address, job_id)
    if interrupted.is_set() and info.status == "STOPPED":
        info.message = "stopped by Ctrl-C / SIGTERM"
    return info
