"""Real MCP server processes for tests: stdio specs, and HTTP servers started on a free 127.0.0.1 port and stopped
by PID."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

TEST_SERVER = Path(__file__).with_name("mcp_test_server.py")


def calculator_file() -> Path:
    from trainctl.runtime.tools import calculator

    return Path(calculator.__file__)


def calculator_entry(log: Path | None = None) -> dict:
    """The mcpServers entry of the built-in calculator over stdio (run by path: stdio servers get no PYTHONPATH)."""
    args = [str(calculator_file())] + (["--log", str(log)] if log else [])
    return {"command": sys.executable, "args": args}


def probe_server_entry(*extra: str, env: dict | None = None) -> dict:
    entry = {"command": sys.executable, "args": [str(TEST_SERVER), *extra]}
    if env:
        entry["env"] = env
    return entry


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with code {proc.returncode} before listening on {port}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout:g} s")


@contextlib.contextmanager
def http_server(argv: list[str], port: int) -> Iterator[subprocess.Popen]:
    """A server process listening on 127.0.0.1:port for the duration; stopped by its PID (then killed)."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for_port(port, proc)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        if proc.stderr:
            proc.stderr.close()


def processes_running(marker: str) -> list[psutil.Process]:
    """Live processes whose command line holds `marker` (a unique path or argument of one test)."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        with contextlib.suppress(psutil.Error):
            if p.info["status"] != psutil.STATUS_ZOMBIE and marker in " ".join(p.info["cmdline"] or []):
                found.append(p)
    return found


def wait_gone(marker: str, timeout: float = 20.0) -> list[psutil.Process]:
    """Wait until no process holds `marker`; returns those still alive at the timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = processes_running(marker)
        if not alive:
            return []
        time.sleep(0.2)
    return processes_running(marker)
