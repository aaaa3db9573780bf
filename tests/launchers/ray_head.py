"""A one-node Ray cluster on 127.0.0.1 with token authentication, started by a test and stopped by PID (never
`ray stop`, which stops every Ray on the machine)."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psutil

# every service on its own free port: Ray's defaults (52365, 10001, ...) collide with any other cluster here
PORT_FLAGS = (
    "--port",
    "--dashboard-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--runtime-env-agent-port",
    "--metrics-export-port",
    "--ray-client-server-port",
    "--node-manager-port",
    "--object-manager-port",
)


def free_ports(n: int) -> list[int]:
    """n distinct free ports: every socket stays bound until all are chosen, so no port is handed out twice."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class Head:
    address: str  # the dashboard (Jobs API): http://127.0.0.1:PORT
    home: Path  # the HOME it was started with (its ~/.ray/auth_token)
    token: str
    proc: subprocess.Popen
    log: Path
    temp_dir: Path
    family: set[int] = field(default_factory=set)

    def stop(self) -> None:
        if psutil.pid_exists(self.proc.pid):
            self.family |= {p.pid for p in psutil.Process(self.proc.pid).children(recursive=True)}
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        procs = [psutil.Process(p) for p in self.family if psutil.pid_exists(p)]
        # some of Ray's processes ignore SIGTERM (each stop waited out the whole 5 s it gave them): killed after 1 s
        _, alive = psutil.wait_procs(procs, timeout=1)
        for p in alive:
            p.kill()
        self.proc.wait(timeout=10)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def start_head(home: Path, path: str | None = None, num_cpus: int = 4) -> Head:
    """`ray start --head --block` (the venv's `ray`, by its path) with HOME=home holding a token, as on a machine where
    one exists (Ray 2.60 then turns token authentication on). `path`: the PATH it starts with, where a job's `python`
    is looked up (default: the venv's bin first, as a user who activated it)."""
    ports = dict(zip(PORT_FLAGS, free_ports(len(PORT_FLAGS)), strict=True))
    env = {**os.environ, "HOME": str(home), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    for var in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        env.pop(var, None)
    token = secrets.token_hex(16)
    (home / ".ray").mkdir(parents=True, exist_ok=True)
    (home / ".ray" / "auth_token").write_text(token)
    ray = Path(sys.executable).parent / "ray"
    env["PATH"] = path if path is not None else f"{ray.parent}{os.pathsep}{env.get('PATH', '')}"
    flags = [f"{k}={v}" for k, v in ports.items()]
    flags += ["--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1", f"--num-cpus={num_cpus}"]
    # a temp dir of its own: a job's driver joins the cluster named in TEMP_DIR/ray_current_cluster, which in the
    # shared /tmp/ray is whichever cluster on the machine started last (a driver of ours joined another's: its
    # workers could not fetch the job's working_dir). Short: Ray's socket paths under it must fit in 107 bytes
    temp_dir = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    flags += ["--disable-usage-stats", f"--temp-dir={temp_dir}"]
    log = home / "ray-head.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [str(ray), "start", "--head", "--block", *flags],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    address = f"http://127.0.0.1:{ports['--dashboard-port']}"
    head = Head(address, home, token, proc, log, temp_dir)
    # ~6 s on an idle machine; minutes when the suite's trainings share the cores with it
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            urllib.request.urlopen(f"{address}/api/version", timeout=2)
            break
        except urllib.error.HTTPError:
            break  # it answers (401: it asks for the token, which is the point)
        except OSError:
            time.sleep(1)
    else:
        head.stop()
        raise RuntimeError(f"the Ray head did not come up; its log: {log}")
    head.family = {proc.pid, *(p.pid for p in psutil.Process(proc.pid).children(recursive=True))}
    return head
