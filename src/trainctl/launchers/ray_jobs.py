"""Ray Jobs: submitting a run to a cluster's Jobs API, following it, listing and stopping jobs.

A job's working_dir is a small staging folder holding only the backend config (never model weights or a
virtualenv). Its runtime_env carries no secret unless the user names one to forward (hardware.forward_secrets): Ray
shows a job's env_vars to every token holder, on its dashboard and in GET /api/jobs/, and keeps them in the job
table after the run (ray#28276, #39502).

Token authentication: Ray 2.60 turns it on for a cluster started where a token exists (~/.ray/auth_token), while its
clients send one only under RAY_AUTH_MODE=token. trainctl asks the Jobs API whether it wants a token and, when it
does, sends the one the user has, found as Ray's own clients find it: RAY_AUTH_TOKEN, then the file
RAY_AUTH_TOKEN_PATH names, then ~/.ray/auth_token. The token is a secret: never written, echoed or logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from trainctl.errors import TrainctlError
from trainctl.secrets import Redactor

TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
# how long a submission waits for a freshly started cluster's job agent
AGENT_WAIT_SECONDS = 90
TOKEN_HINT = (
    "copy the cluster's token (on the head node: `ray get-auth-token`) and export RAY_AUTH_TOKEN=..., or point "
    "RAY_AUTH_TOKEN_PATH at a file holding it"
)


def http_address(address: str) -> str:
    if not address:
        raise TrainctlError(
            "no Ray cluster address.",
            hint="export RAY_ADDRESS=http://HEAD_IP:8265, set hardware.ray_address, or pass --address",
        )
    return (address if "://" in address else f"http://{address}").rstrip("/")


def auth_token() -> tuple[str | None, str]:
    """The user's Ray token and where it came from, as Ray's clients look for it; (None, where it was looked)."""
    if os.environ.get("RAY_AUTH_TOKEN", "").strip():
        return os.environ["RAY_AUTH_TOKEN"].strip(), "RAY_AUTH_TOKEN"
    candidates = []
    if os.environ.get("RAY_AUTH_TOKEN_PATH"):
        candidates.append(("RAY_AUTH_TOKEN_PATH", Path(os.environ["RAY_AUTH_TOKEN_PATH"]).expanduser()))
    candidates.append(("~/.ray/auth_token", Path.home() / ".ray" / "auth_token"))
    for name, path in candidates:
        with contextlib.suppress(OSError):
            token = path.read_text().strip()
            if token:
                return token, name
    return None, "RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH and ~/.ray/auth_token"


_AUTH_MODES: dict[str, str] = {}


def auth_mode(address: str) -> str:
    """The cluster's authentication mode as its dashboard says it (GET /api/authentication_mode, a public route):
    "token" or "disabled"; "unknown" from a Ray too old to say, "unreachable: REASON" when nothing answers."""
    url = http_address(address)
    if url in _AUTH_MODES:
        return _AUTH_MODES[url]
    try:
        with urllib.request.urlopen(f"{url}/api/authentication_mode", timeout=10) as r:
            mode = str(json.loads(r.read()).get("authentication_mode") or "unknown")
    except urllib.error.HTTPError as e:
        mode = "token" if e.code in (401, 403) else "unknown"
    except (OSError, ValueError) as e:
        return f"unreachable: {getattr(e, 'reason', e)}"
    _AUTH_MODES[url] = mode
    return mode


def auth_headers(address: str) -> dict[str, str]:
    """The headers every request to the cluster's dashboard carries (the Jobs API, the state API): its token when it
    asks for one. Ray's own clients send one only under RAY_AUTH_MODE=token."""
    if auth_mode(address) != "token":
        return {}
    token, where = auth_token()
    if token is None:
        raise TrainctlError(
            f"the Ray cluster at {address} asks for a token (token authentication), and none was found in {where}.",
            hint=TOKEN_HINT,
        )
    return {"Authorization": f"Bearer {token}"}


def _client(address: str):
    from ray.job_submission import JobSubmissionClient

    url = http_address(address)
    headers = auth_headers(url)
    try:
        return JobSubmissionClient(url, headers=headers)
    except Exception as e:  # the client connects on construction
        raise _refused(url, e, headers) from None


def state_client(address: str):
    """Ray's state API client (nodes, actors, ...) for the cluster's dashboard, with the same token as the Jobs API."""
    from ray.util.state.api import StateApiClient

    url = http_address(address)
    headers = {"Content-Type": "application/json", **auth_headers(url)}
    try:
        return StateApiClient(url, headers=headers)
    except Exception as e:
        raise _refused(url, e, headers) from None


def session_name(address: str) -> str | None:
    """The cluster's session (a new one each time its head starts), as its Jobs API says it; None from a Ray too old
    to say."""
    try:
        return _client(address)._do_request("GET", "/api/version").json().get("session_name") or None
    except (ValueError, AttributeError):
        return None


def _refused(url: str, e: Exception, headers: dict) -> TrainctlError:
    text = Redactor().text(str(e).splitlines()[0] if str(e) else type(e).__name__)
    if "Authentication failed" in str(e) or "403" in str(e):
        return TrainctlError(
            f"the Ray cluster at {url} refused the token from {auth_token()[1]}: {text}",
            hint="the token is not this cluster's; " + TOKEN_HINT,
        )
    if "Authentication required" in str(e) or "401" in str(e):
        return TrainctlError(f"the Ray cluster at {url} asks for a token: {text}", hint=TOKEN_HINT)
    return TrainctlError(
        f"cannot reach the Ray Jobs API at {url}: {text}",
        hint="check that the cluster's dashboard is running (`ray start --head --dashboard-host 0.0.0.0`) "
        "and the address is the dashboard's (port 8265)",
    )


@contextlib.contextmanager
def ray_logs_to(path: Path | None) -> Iterator[None]:
    """Ray's own log lines (the job client's "WebSocket closed for job ...") go to the run's log, not the terminal."""
    logger = logging.getLogger("ray")
    streams = [h for h in logger.handlers if isinstance(h, logging.StreamHandler) and not hasattr(h, "baseFilename")]
    for h in streams:
        logger.removeHandler(h)
    handler: logging.Handler = logging.FileHandler(path, encoding="utf-8") if path else logging.NullHandler()
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        handler.close()
        for h in streams:
            logger.addHandler(h)


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
        return _submit(
            client,
            address,
            entrypoint=entrypoint,
            submission_id=job_id,
            runtime_env={"working_dir": str(staging), "env_vars": env_vars},
            metadata={"trainctl_run": run_name},
        )
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _submit(client, address: str, **job) -> str:
    """client.submit_job(**job), waiting for the job agent of a cluster that just started; returns the job id."""
    deadline = time.monotonic() + AGENT_WAIT_SECONDS
    while True:
        try:
            return client.submit_job(**job)
        except RuntimeError as e:
            # a cluster that just started answers before its job agent is up
            if "No available agent" not in str(e) or time.monotonic() > deadline:
                if "Authentication" in str(e):
                    raise _refused(http_address(address), e, {}) from None
                raise TrainctlError(
                    f"the cluster at {address} refused the job: {Redactor().text(str(e).splitlines()[0])}",
                    hint="check the cluster with: trainctl doctor hardware.ray_address=" + address,
                ) from None
            time.sleep(2)


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
        with ray_logs_to(log_path):
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


# a job that reports, for every alive node, which of the named variables its Ray workers see (never their values)
_NODE_ENV_PROBE = """
import json, os, socket, sys, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
names = sys.argv[1].split(",")
ray.init()
@ray.remote(num_cpus=0)
def probe():
    return socket.gethostname(), {n: bool(os.environ.get(n)) for n in names}
pinned = [NodeAffinitySchedulingStrategy(n["NodeID"], soft=False) for n in ray.nodes() if n["Alive"]]
found = ray.get([probe.options(scheduling_strategy=s).remote() for s in pinned])
print("TRAINCTL_NODE_ENV " + json.dumps(dict(found)))
"""


def node_env(address: str, names: list[str], timeout: float = 120.0) -> dict[str, dict[str, bool]]:
    """node -> {name: set?} for the named variables, as a job's workers see them on each alive node."""
    import shlex

    entrypoint = f"python -c {shlex.quote(_NODE_ENV_PROBE)} {shlex.quote(','.join(names))}"
    answer, info, _ = probe(address, entrypoint, "TRAINCTL_NODE_ENV", "the node check", timeout)
    if answer is None:
        raise TrainctlError(f"the node check (job {info.job_id}) ended {info.status} without an answer: {info.message}")
    return answer


def probe(
    address: str, entrypoint: str, marker: str, what: str, timeout: float = 120.0
) -> tuple[object | None, JobInfo, str]:
    """Run a small job that prints one line `MARKER <json>`; returns (that JSON or None, how the job ended, its
    logs). The job is trainctl's own question (metadata trainctl: check); one that outlives `timeout` is stopped."""
    client = _client(address)
    job_id = _submit(client, address, entrypoint=entrypoint, metadata={"trainctl": "check"})
    deadline = time.monotonic() + timeout
    while True:
        info = job_status(address, job_id)
        if info.status in TERMINAL:
            break
        if time.monotonic() > deadline:
            with contextlib.suppress(Exception):
                client.stop_job(job_id)
            raise TrainctlError(f"{what} (job {job_id}) did not finish within {timeout:.0f} s.")
        time.sleep(0.5)
    logs = client.get_job_logs(job_id)
    for line in logs.splitlines():
        if line.startswith(marker + " "):
            return json.loads(line.removeprefix(marker + " ")), info, logs
    return None, info, logs
