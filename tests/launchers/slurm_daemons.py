"""A real Slurm on this machine for the tests: munged, slurmctld and two slurmd (nodes node1 and node2, both on this
host), started as root from a temporary folder without systemd and stopped by the PIDs in their pid files
(../shared/notes/engines.md has the configuration measured here). Debian's slurmctld, slurmd, slurm-client and
munge packages provide them (`make slurm` installs them); without them, or without root, the tests that need them
skip, saying so."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "scontrol")
NODES = ("node1", "node2")
PARTITION = "debug"
# the partition's limits, which the tests exceed on purpose
MAX_NODES = 2
MAX_TIME = "01:00:00"


def unavailable() -> str | None:
    """Why a real Slurm cannot start here, or None."""
    missing = [d for d in DAEMONS if shutil.which(d) is None and not Path(f"/usr/sbin/{d}").is_file()]
    if missing:
        return f"Slurm is not installed ({', '.join(missing)} missing): run `make slurm` (apt-get as root)"
    if os.geteuid() != 0:
        return "a test Slurm runs its daemons as root (SlurmdUser=root): run the tests as root"
    return None


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _bin(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


@dataclass
class SlurmCluster:
    root: Path
    conf: Path

    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def pid_files(self) -> list[Path]:
        return [self.root / "munge" / "munged.pid", self.root / "slurmctld.pid"] + [
            self.root / f"slurmd-{n}.pid" for n in NODES
        ]

    def run(self, *args: str) -> str:
        env = {**os.environ, **self.env()}
        return subprocess.run(list(args), capture_output=True, text=True, env=env, timeout=60, check=True).stdout

    def jobs(self) -> list[str]:
        """The jobs Slurm knows (queued, running, or ended lately): 'ID STATE' each."""
        out = self.run("squeue", "-h", "-t", "all", "-o", "%i %T")
        return [line.strip() for line in out.splitlines() if line.strip()]


def start(root: Path) -> SlurmCluster:
    """Start munged, slurmctld and the two slurmd in `root` (mode 755: munged refuses a socket folder others cannot
    traverse); returns once both nodes are idle."""
    for sub in ("munge", "state", "log", *(f"spool/{n}" for n in NODES)):
        (root / sub).mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    munge = root / "munge"
    munge.chmod(0o755)
    key = munge / "munge.key"
    subprocess.run([_bin("mungekey"), "--create", f"--keyfile={key}"], check=True, capture_output=True)
    key.chmod(0o600)
    socket_path = munge / "munge.socket.2"
    subprocess.run(
        [
            _bin("munged"),
            f"--key-file={key}",
            f"--socket={socket_path}",
            f"--pid-file={munge / 'munged.pid'}",
            f"--log-file={munge / 'munged.log'}",
            f"--seed-file={munge / 'munge.seed'}",
        ],
        check=True,
        capture_output=True,
    )
    ctld_port, d1, d2, d0 = _free_ports(4)
    megabytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20 // 4
    cpus = os.cpu_count() or 2
    host = socket.gethostname()
    conf = root / "slurm.conf"
    conf.write_text(
        "\n".join(
            [
                "ClusterName=trainctltest",
                "SlurmctldHost=localhost(127.0.0.1)",
                "SlurmUser=root",
                "SlurmdUser=root",
                f"SlurmctldPort={ctld_port}",
                f"SlurmdPort={d0}",
                "AuthType=auth/munge",
                f"AuthInfo=socket={socket_path}",
                "CredType=cred/munge",
                f"StateSaveLocation={root / 'state'}",
                f"SlurmdSpoolDir={root / 'spool'}/%n",
                f"SlurmctldPidFile={root / 'slurmctld.pid'}",
                f"SlurmdPidFile={root}/slurmd-%n.pid",
                f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
                f"SlurmdLogFile={root}/log/slurmd-%n.log",
                "ProctrackType=proctrack/pgid",
                "TaskPlugin=task/none",
                "JobAcctGatherType=jobacct_gather/none",
                "AccountingStorageType=accounting_storage/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core",
                "MpiDefault=none",
                "ReturnToService=2",
                # ending a step took ~30 s at the default
                "KillWait=5",
                # two nodes on this one host, each with all of its CPUs (the jobs share them)
                *(
                    f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={p} CPUs={cpus} RealMemory={megabytes}"
                    for n, p in zip(NODES, (d1, d2), strict=True)
                ),
                f"PartitionName={PARTITION} Nodes={','.join(NODES)} Default=YES MaxNodes={MAX_NODES} "
                f"MaxTime={MAX_TIME} State=UP",
                "",
            ]
        )
    )
    cluster = SlurmCluster(root, conf)
    try:
        subprocess.run([_bin("slurmctld"), "-f", str(conf), "-i"], check=True, capture_output=True)
        for n in NODES:
            subprocess.run([_bin("slurmd"), "-f", str(conf), "-N", n], check=True, capture_output=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(subprocess.SubprocessError):
                states = cluster.run("sinfo", "-h", "-N", "-o", "%N %t").split()
                if states.count("idle") == len(NODES):
                    return cluster
            time.sleep(0.5)
        raise RuntimeError(f"the test Slurm's nodes did not come up; its logs: {root / 'log'}")
    except BaseException:
        stop(cluster)
        raise


def stop(cluster: SlurmCluster) -> None:
    """Cancel what runs, then stop each daemon by the PID in its pid file (never by name)."""
    with contextlib.suppress(Exception):
        cluster.run("scancel", "--full", "--user=root")
    pids = []
    for f in reversed(cluster.pid_files()):
        with contextlib.suppress(OSError, ValueError):
            pids.append(int(f.read_text().split()[0]))
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)
    for pid in pids:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    return False
