"""Ray jobs for real: a Ray head started on 127.0.0.1 by the test (and stopped by PID, never `ray stop`)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.launch.conftest import FAST_SFT


def _free_ports(n: int) -> list[int]:
    """n distinct free ports: every socket stays bound until all are chosen, so no port is handed out twice."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    """A one-node Ray cluster on loopback; its processes are stopped by PID when the module ends."""
    home = tmp_path_factory.mktemp("rayhome")
    # every service on its own free port: Ray's defaults (52365, 10001, ...) collide with any other cluster here
    names = [
        "--port",
        "--dashboard-port",
        "--dashboard-agent-listen-port",
        "--dashboard-agent-grpc-port",
        "--runtime-env-agent-port",
        "--metrics-export-port",
        "--ray-client-server-port",
        "--node-manager-port",
        "--object-manager-port",
    ]
    ports = dict(zip(names, _free_ports(len(names)), strict=True))
    dashboard = ports["--dashboard-port"]
    env = {**os.environ, "HOME": str(home), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    env.pop("RAY_ADDRESS", None)
    ray = Path(sys.executable).parent / "ray"
    # a job runs `python` from the PATH its cluster was started with: as a user would, start it inside the venv
    env["PATH"] = f"{ray.parent}{os.pathsep}{env.get('PATH', '')}"
    flags = [f"{k}={v}" for k, v in ports.items()]
    flags += ["--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1", "--num-cpus=4", "--disable-usage-stats"]
    log = open(home / "ray-head.log", "w")  # noqa: SIM115 - closed when the fixture ends
    proc = subprocess.Popen(
        [str(ray), "start", "--head", "--block", *flags],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    address = f"http://127.0.0.1:{dashboard}"
    deadline = time.monotonic() + 90
    import urllib.request

    while time.monotonic() < deadline and proc.poll() is None:
        try:
            urllib.request.urlopen(f"{address}/api/version", timeout=2)
            break
        except OSError:
            time.sleep(1)
    else:
        proc.kill()
        raise RuntimeError(f"the Ray head did not come up; its log: {home / 'ray-head.log'}")
    family = {proc.pid, *(p.pid for p in psutil.Process(proc.pid).children(recursive=True))}
    yield {"address": address, "home": home}
    family |= (
        {p.pid for p in psutil.Process(proc.pid).children(recursive=True)} if psutil.pid_exists(proc.pid) else set()
    )
    os.killpg(proc.pid, signal.SIGTERM)
    procs = [psutil.Process(p) for p in family if psutil.pid_exists(p)]
    _, alive = psutil.wait_procs(procs, timeout=5)  # some of Ray's processes ignore SIGTERM: they are killed
    for p in alive:
        p.kill()
    log.close()


@pytest.fixture
def cluster(ray_head, monkeypatch):
    monkeypatch.setenv("HOME", str(ray_head["home"]))  # where the head keeps its auth token
    return ray_head["address"]


def _job(address: str) -> list[str]:
    return ["hardware.launcher=ray_job", f"hardware.ray_address={address}"]


def test_sft_as_a_ray_job(cli, ready, cluster, tmp_path):
    result = cli("train", *FAST_SFT, "run.max_steps=2", "run.name=rayjob", *_job(cluster))
    assert result.exit_code == 0, result.output
    assert "step 2/2 (100%)" in result.stdout, "the live view follows the job"
    assert "step:2 - " in (tmp_path / "work" / "runs" / "rayjob" / "logs" / "attempt-1.log").read_text(), (
        "the job's logs are streamed into the run's log"
    )
    run = tmp_path / "work" / "runs" / "rayjob"
    assert (run / "checkpoints" / "global_step_2").is_dir()
    attempt = json.loads((run / "run.json").read_text())["attempts"][0]
    assert attempt["job_status"] == "SUCCEEDED" and attempt["job_id"].startswith("trainctl-rayjob-")
    listed = cli("jobs", "ls", "--address", cluster)
    assert attempt["job_id"] in listed.stdout and "SUCCEEDED" in listed.stdout
    status = cli("jobs", "status", attempt["job_id"], "--address", cluster)
    assert status.stdout.startswith(f"{attempt['job_id']}: SUCCEEDED")


def test_a_failing_job_reports_failed(cli, ready, cluster, tmp_path):
    boom = tmp_path / "boom.py"
    boom.write_text("class Boom:\n    def __init__(self, *a, **k):\n        raise RuntimeError('boom in the job')\n")
    result = cli(
        "train",
        *FAST_SFT,
        "run.name=rayfail",
        f"data.custom_cls.path={boom}",
        "data.custom_cls.name=Boom",
        *_job(cluster),
    )
    assert result.exit_code == 3, result.output
    assert "RuntimeError: boom in the job" in result.stderr
    attempt = json.loads((tmp_path / "work" / "runs" / "rayfail" / "run.json").read_text())["attempts"][0]
    assert attempt["job_status"] == "FAILED"


def test_jobs_stop_stops_a_running_job(cli, ready, cluster):
    submitted = cli("train", *FAST_SFT, "run.epochs=100", "run.name=raystop", "--detach", *_job(cluster))
    assert submitted.exit_code == 0, submitted.output
    job_id = submitted.stdout.split("Submitted Ray job ")[1].split(";")[0]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if "RUNNING" in cli("jobs", "status", job_id, "--address", cluster).stdout:
            break
        time.sleep(1)
    # `runs ls` asks the Jobs API about a detached job's run
    row = next(line for line in cli("runs", "ls").stdout.splitlines() if line.startswith("raystop "))
    assert f"running (Ray job {job_id})" in row, row
    stopped = cli("jobs", "stop", job_id, "--address", cluster)
    assert stopped.exit_code == 0, stopped.output
    assert stopped.stdout.strip() == f"{job_id}: STOPPED"
    row = next(line for line in cli("runs", "ls").stdout.splitlines() if line.startswith("raystop "))
    assert f"stopped (Ray job {job_id})" in row, row


def test_dpo_with_ray_train_as_a_ray_job(cli, ready, cluster, tmp_path):
    """DPO across 'machines': Ray Train's TorchTrainer with two workers, submitted as a Ray job."""
    from tests.launch.conftest import FAST_DPO
    from trainctl.metrics import read_metrics, series

    result = cli("train", *FAST_DPO, "run.max_steps=8", "run.name=dporay", "hardware.gpus_per_node=2", *_job(cluster))
    assert result.exit_code == 0, result.output
    run = tmp_path / "work" / "runs" / "dporay"
    log = (run / "logs" / "attempt-1.log").read_text()
    assert "world_rank=0" in log and "world_rank=1" in log, "two Ray Train workers"
    assert (run / "checkpoints" / "checkpoint-8" / "model.safetensors").is_file()
    losses = [v for _, v in series(read_metrics(run), "train/loss")]
    assert len(losses) == 8 and losses[-1] < losses[0]
