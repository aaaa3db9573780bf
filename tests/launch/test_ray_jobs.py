"""Ray jobs for real: a Ray head started on 127.0.0.1 by the test (and stopped by PID, never `ray stop`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.launch.conftest import FAST_SFT
from tests.launchers.ray_head import start_head


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    """A one-node Ray cluster on loopback with token authentication; stopped by PID when the module ends."""
    head = start_head(tmp_path_factory.mktemp("rayhome"))
    yield head
    head.stop()


@pytest.fixture
def cluster(ray_head, monkeypatch):
    """The cluster's address; its token only in RAY_AUTH_TOKEN (no RAY_AUTH_MODE, no token file in this HOME)."""
    monkeypatch.setenv("RAY_AUTH_TOKEN", ray_head.token)
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    return ray_head.address


def _api_jobs(address: str, token: str) -> str:
    import urllib.request

    request = urllib.request.Request(f"{address}/api/jobs/", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as r:
        return r.read().decode()


def _job(address: str) -> list[str]:
    return ["hardware.launcher=ray_job", f"hardware.ray_address={address}"]


def test_the_cluster_asks_for_a_token(ray_head):
    """The fixture's head runs with token authentication, as `ray start --head` does where a token exists."""
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"{ray_head.address}/api/jobs/", timeout=30)
    assert e.value.code == 401


# The jobs that train (a minute each in the suite) are slow; the default suite keeps what a head answers without a
# job running: its token authentication, a launch refused before anything is submitted, the secrets plan, doctor.
# CI runs both suites (.ci/run)
@pytest.mark.slow
def test_sft_as_a_ray_job(cli, ready, cluster, tmp_path, ray_head):
    """Only RAY_AUTH_TOKEN is set; the secrets of this environment stay out of the job (GET /api/jobs/ shows a job's
    runtime_env to every token holder), and Ray's own log lines stay out of trainctl's output."""
    secrets_here = {"HF_TOKEN": "hf_notforthejob12345", "WANDB_API_KEY": "wandb-notforthejob-67890"}
    env = {**os.environ, **secrets_here, "TRAINCTL_PROGRESS_EVERY": "0"}
    proc = subprocess.run(
        [sys.executable, "-m", "trainctl", "train", *FAST_SFT, "run.max_steps=2", "run.name=rayjob", *_job(cluster)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    result = proc  # stdout and stderr as the user sees them
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "step 2/2 (100%)" in result.stdout, "the live view follows the job"
    for text in (proc.stdout, proc.stderr):
        assert "sdk.py" not in text and "WebSocket closed" not in text, text[-2000:]
    listing = _api_jobs(cluster, ray_head.token)
    assert "trainctl-rayjob-" in listing
    for value in secrets_here.values():
        assert value not in listing, "a secret in the job table"
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


def test_without_a_token_nothing_is_submitted(cli, ready, cluster, monkeypatch, no_processes):
    monkeypatch.delenv("RAY_AUTH_TOKEN")
    result = cli("train", *FAST_SFT, "run.name=notoken", *_job(cluster))
    assert result.exit_code == 1, result.output
    assert (
        f"the Ray cluster at {cluster} asks for a token (token authentication), and none was found in "
        "RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH and ~/.ray/auth_token." in result.stderr
    )
    assert "export RAY_AUTH_TOKEN=" in result.stderr


def test_a_forwarded_secret_is_warned_about(cli, ready, cluster, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_forwarded123456")
    result = cli("train", *FAST_SFT, "logger=wandb", "hardware.forward_secrets=[HF_TOKEN]", *_job(cluster), "--dry-run")
    assert result.exit_code == 0, result.output
    assert "Warning: hardware.forward_secrets=['HF_TOKEN']: the job's runtime_env will carry HF_TOKEN" in result.stderr
    assert "read from the cluster nodes' environment: WANDB_API_KEY (logger=wandb)" in result.stdout
    assert "forwarded in the job's runtime_env (hardware.forward_secrets): HF_TOKEN" in result.stdout
    assert "hf_forwarded123456" not in result.output


def test_doctor_reports_auth_and_the_secrets_the_nodes_lack(cli, cluster, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "wandb-here-not-there-123")  # here, not on the cluster's nodes
    result = cli("doctor", "logger=wandb", *_job(cluster))
    assert result.exit_code == 1, result.output
    lines = [" ".join(line.split()) for line in result.stdout.splitlines()]
    assert "ok Ray auth token authentication; the token from RAY_AUTH_TOKEN" in lines, result.stdout
    # the nodes, through the state API with the same token a launch sends (Ray's client sends none without
    # RAY_AUTH_MODE=token: "Missing authentication token")
    assert "ok hardware=cpu wants 1 node(s) x 1 process(es); cluster has 1 node(s) with CPU: [4]" in lines, lines
    # the cluster's own answer: the job's `python` (the venv's: its `ray start` had it first on its PATH)
    python = next(line for line in lines if line.startswith("ok job python "))
    assert f"{sys.executable} has verl " in python, python
    assert any(line.startswith("FAIL WANDB_API_KEY logger=wandb: not set on ") for line in lines), result.stdout
    assert "wandb-here-not-there-123" not in result.output


@pytest.mark.slow
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


@pytest.mark.slow
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
    stopped = cli("runs", "stop", "raystop")
    assert stopped.exit_code == 0, stopped.output
    assert f"stopped raystop (Ray job {job_id}: STOPPED)" in stopped.stdout
    stopped = cli("jobs", "stop", job_id, "--address", cluster)  # already stopped: says so
    assert stopped.exit_code == 0, stopped.output
    assert stopped.stdout.strip() == f"{job_id}: STOPPED"
    row = next(line for line in cli("runs", "ls").stdout.splitlines() if line.startswith("raystop "))
    assert "interrupted (stopped by trainctl runs stop)" in row, row


@pytest.mark.slow  # a minute: Ray Train's two workers
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


@pytest.mark.slow  # two minutes: the agent run and its tool loop are in the default suite (test_agent_grpo)
def test_an_agent_run_with_the_calculator_as_a_ray_job(cli, isolated, tiny_tools_dir, cluster, tmp_path, ray_head):
    """tools=calculator as a Ray job (issue 30): the job's working dir carries its tools.yaml and the calculator's
    server file; the agent-loop workers start the stdio server on the node and call it; no secret goes with the job."""
    import shutil

    from tests.real_runs import REWARD
    from trainctl.runtime.tool_calls import read_call_logs

    shutil.copytree(tiny_tools_dir, isolated / "models" / "tiny-tools")
    assert cli("data", "prep", "arith-tools").exit_code == 0
    result = cli(
        "train", "recipe=agent-arith-tiny-cpu", "run.max_steps=1", "run.val_every=null", "run.name=rayagent",
        "reward=fn", f"reward.fn={REWARD}:compute_score", "actor_rollout_ref.rollout.n=2", *_job(cluster),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    run = tmp_path / "work" / "runs" / "rayagent"
    job = json.loads(_api_jobs(cluster, ray_head.token))
    (entry,) = [j for j in (job if isinstance(job, list) else job.values()) if "rayagent" in str(j)]
    assert 'multi_turn.tool_config_path="$(pwd)"/tools.yaml' in entry["entrypoint"], entry["entrypoint"]
    shipped = (run / "tools-job.yaml").read_text()
    assert "calculator.py" in shipped and "command: python" in shipped, shipped
    calls = read_call_logs(run / "tools" / "calls")
    executed = [json.loads(line) for line in (run / "tools" / "calculator.jsonl").read_text().splitlines()]
    assert calls and executed, "the job's workers called the calculator, which answered"
    assert {c["pid"] for c in executed}.isdisjoint({os.getpid()})
    from trainctl.metrics import read_metrics

    assert read_metrics(run)[1]["tool/calls"] == len(calls)


def test_the_clusters_python_is_asked_once_a_session(cluster):
    """A verdict that holds is kept by cluster session: the next launch (or doctor) submits no job to ask again."""
    from trainctl.launch.lock import versions
    from trainctl.launchers import ray_jobs
    from trainctl.launchers.job_python import Needs, ask

    want = Needs("python", {"verl": versions()["verl"], "trainctl": versions()["trainctl"]})
    first = ask(cluster, want)
    jobs = len(ray_jobs.list_jobs(cluster))
    second = ask(cluster, want)
    assert (first.ok, first.cached, second.ok, second.cached) == (True, False, True, True)
    assert second.executable == first.executable == sys.executable
    assert len(ray_jobs.list_jobs(cluster)) == jobs, "a cached verdict submits nothing"
