"""The real server, started as a user starts it (`python -m trainctl serve`, uvicorn on 127.0.0.1 and a free port),
over the session's real runs; one per test module."""

from __future__ import annotations

import contextlib
import json
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

# a secret of the server's environment and the server's own token: neither may appear in any answer
SERVER_SECRET = "hf_serverside_secret_0123456789"
TOKEN = "serve-test-token-abcdefghijklmnop"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    proc: subprocess.Popen
    port: int
    log: Path
    token: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, token: bool = True, **kwargs) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token}"} if token and self.token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60, **kwargs)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_server(
    roots: list[Path], env: dict[str, str], cwd: Path, *args: str, log: Path, token: str | None = None
) -> Server:
    """`trainctl serve --runs ROOT ... ARGS` on a free port; returns once it answers."""
    for _ in range(3):
        port = free_port()
        argv = [sys.executable, "-m", "trainctl", "serve", *(f"--runs={r}" for r in roots), f"--port={port}", *args]
        with open(log, "a") as out:
            proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        server = Server(proc, port, log, token)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(f"{server.url}/login", timeout=2)
                return server
            time.sleep(0.1)
        server.stop()
        if "in use" not in log.read_text():
            break
    raise AssertionError(f"the server did not start:\n{log.read_text()[-3000:]}")


def server_env(home, **extra: str) -> dict[str, str]:
    return home.env(HF_TOKEN=SERVER_SECRET, **extra)


def copy_run(source: Path, target: Path, checkpoints: bool = False) -> dict:
    """A copy of a real run (its checkpoints left out unless asked for) under another name; returns its run.json."""
    shutil.copytree(source, target, ignore=None if checkpoints else shutil.ignore_patterns("checkpoints"))
    status = json.loads((target / "run.json").read_text())
    status["name"] = target.name
    (target / "run.json").write_text(json.dumps(status, indent=2))
    return status


def fake_live_run(source: Path, target: Path) -> subprocess.Popen:
    """A copy of a finished run that says it is running, supervised by a real process of ours (a `sleep` in the
    supervisor's place: alive, so `runs ls` says running, and `runs stop` can stop it). Returns that process."""
    status = copy_run(source, target)
    proc = subprocess.Popen(["sleep", "600"], start_new_session=True)
    status["state"] = "running"
    last = status["attempts"][-1]
    for k in ("ended", "exit_code", "state", "seconds"):
        last.pop(k, None)
    status["live"] = {
        "pid": proc.pid,
        "pid_started": psutil.Process(proc.pid).create_time(),
        "trainer_pid": None,
        "host": socket.gethostname(),
        "heartbeat": time.time(),
    }
    (target / "run.json").write_text(json.dumps(status, indent=2))
    return proc


def stop_if_running(run: Path) -> None:
    """A job a failed test left running is stopped (`runs stop`), not left to train on."""
    from trainctl.launch.control import stop_run
    from trainctl.runs.status import read_run

    if (run / "run.json").is_file() and read_run(run, query_jobs=False).alive:
        stop_run(run, 5)


def end(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()


class Events:
    """An SSE client on a thread: each event with the time it arrived."""

    def __init__(self, url: str, headers: dict | None = None):
        self.events: queue.Queue = queue.Queue()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._read, args=(url, headers or {}), daemon=True)
        self.thread.start()

    def _read(self, url, headers):
        try:
            with httpx.Client(timeout=None) as c, c.stream("GET", url, headers=headers) as r:
                assert r.status_code == 200
                self.response = r
                kind, data, eid = None, None, None
                for line in r.iter_lines():
                    if self.stop.is_set():
                        return
                    if line.startswith("event: "):
                        kind = line[7:]
                    elif line.startswith("data: "):
                        data = json.loads(line[6:])
                    elif line.startswith("id: "):
                        eid = line[4:]
                    elif line == "" and kind:
                        self.events.put((time.monotonic(), kind, data, eid))
                        kind = data = None
        except httpx.HTTPError:  # closed: by close(), or by the server stopping at the module's end
            return

    def next(self, kind: str, timeout: float) -> tuple[float, dict, str]:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {kind} event within {timeout} s")
            try:
                at, k, data, eid = self.events.get(timeout=left)
            except queue.Empty:
                continue
            if k == kind:
                return at, data, eid

    def close(self):
        """Drop the connection, as a browser tab that is closed does."""
        self.stop.set()
        response = getattr(self, "response", None)
        if response is not None:
            with contextlib.suppress(Exception):
                response.close()


@pytest.fixture(scope="module")
def copies(tmp_path_factory) -> Path:
    """A runs folder of this module's own (copies of real runs it may change, and the jobs it starts)."""
    root = tmp_path_factory.mktemp("serve") / "runs"
    root.mkdir()
    return root
