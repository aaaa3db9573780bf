"""A real two-node Ray cluster on this machine for the tests: a head and a second node (`ray start --address`), each
with its own ports on loopback (free ports the OS hands out, outside Ray's worker range 10002-19999) and its logical
CPUs (CPUS: 3 and 1), started from the venv (a job's `python` is the one on the PATH `ray start` had) and stopped by
PID: never `ray stop`, which would stop every Ray on the machine. Run as `python -m tests.launchers.ray_nodes DIR`
it starts one by hand and prints its address."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

# logical CPUs of the head and of the second node: one training process on each, and verl's other actors (task
# runner, reward, agent loop, storage: 2 CPUs) beside the head's; the small node is what issue 60's capacity check
# must accept (it asked every node for the 3 CPUs only one needs)
CPUS = (3, 1)
_SERVICES = (
    "--node-manager-port",
    "--object-manager-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--runtime-env-agent-port",
    "--metrics-export-port",
)


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class RayNodes:
    address: str  # the GCS address, 127.0.0.1:PORT (hardware.ray_address for ray_cluster)
    home: Path
    procs: list[subprocess.Popen] = field(default_factory=list)  # each `ray start --block`, its group's leader
    node_ids: list[str] = field(default_factory=list)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def start(home: Path, cpus: tuple[int, int] = CPUS, timeout: float = 300) -> RayNodes:
    """Start the head, then the second node, with `cpus` logical CPUs each; return once both are alive (Ray's GCS
    says so)."""
    home.mkdir(parents=True, exist_ok=True)
    ray = str(Path(sys.executable).parent / "ray")
    env = {**os.environ, "HOME": str(home), "PATH": f"{Path(ray).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    for var in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        env.pop(var, None)
    port, client, *ports = _free_ports(2 + 2 * len(_SERVICES))
    common = ["--block", "--disable-usage-stats", "--node-ip-address=127.0.0.1"]
    head = [ray, "start", "--head", f"--port={port}", f"--ray-client-server-port={client}", "--include-dashboard=false"]
    head += [f"{k}={v}" for k, v in zip(_SERVICES, ports[: len(_SERVICES)], strict=True)]
    nodes = RayNodes(f"127.0.0.1:{port}", home)
    try:
        nodes.procs.append(_start([*head, *common, f"--num-cpus={cpus[0]}"], env, home / "ray-head.log"))
        _wait(nodes, 1, timeout)
        second = [ray, "start", f"--address={nodes.address}"]
        second += [f"{k}={v}" for k, v in zip(_SERVICES, ports[len(_SERVICES) :], strict=True)]
        nodes.procs.append(_start([*second, *common, f"--num-cpus={cpus[1]}"], env, home / "ray-node2.log"))
        nodes.node_ids = _wait(nodes, 2, timeout)
        return nodes
    except BaseException:
        stop(nodes)
        raise


def alive_nodes(address: str) -> list[dict]:
    """The cluster's alive nodes, from its GCS (no driver, no dashboard): node_id, ip, CPUs."""
    from ray._raylet import GcsClient

    found = GcsClient(address=address).get_all_node_info(timeout=10)
    return [
        {"node_id": n.node_id.hex(), "ip": n.node_manager_address, "cpus": dict(n.resources_total).get("CPU", 0)}
        for n in found.values()
        if n.state == 0  # ALIVE
    ]


def _wait(nodes: RayNodes, count: int, timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in nodes.procs):
            raise RuntimeError(f"a Ray node exited while starting; see {nodes.home}/ray-*.log")
        with contextlib.suppress(Exception):
            found = alive_nodes(nodes.address)
            if len(found) >= count:
                return sorted(n["node_id"] for n in found)
        time.sleep(1)
    raise RuntimeError(f"{count} Ray node(s) did not come up within {timeout:.0f} s; see {nodes.home}/ray-*.log")


def stop(nodes: RayNodes) -> None:
    """SIGTERM each node's process group, SIGKILL what is left after 1 s (`ray start --block` took over 20 s to end
    on SIGTERM on a busy machine, and some of Ray's processes ignore it; nothing of a test cluster needs a clean
    end)."""
    import psutil

    family = set()
    for pid in nodes.pids:
        with contextlib.suppress(psutil.Error):
            family |= {pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))}
    for pid in nodes.pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
    procs = [p for p in (_process(pid) for pid in family) if p is not None]
    _, left = psutil.wait_procs(procs, timeout=1)
    for p in left:
        with contextlib.suppress(psutil.Error):
            p.kill()
    for pid in nodes.pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    for proc in nodes.procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


def _process(pid: int):
    import psutil

    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


if __name__ == "__main__":
    started = start(Path(sys.argv[1]))
    print(started.address, " ".join(map(str, started.pids)), flush=True)
