"""trainctl.launchers.local: however its supervising trainctl ends, no process of the run is left, and run.json says
what happened; `runs stop` stops a run from anywhere. The trainer is a stand-in (tests/launchers/supervised.py)
whose daemon grandchild leaves its session, as Ray's processes do."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.shared import processes_with
from trainctl.launchers.tree import MARK_VAR, marked


def _start(run: Path) -> tuple[subprocess.Popen, list[int]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.launchers.supervised", str(run)],
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while not (run / "pids").is_file():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
        time.sleep(0.1)
    return proc, [int(p) for p in (run / "pids").read_text().split()]


def _gone(pids: list[int], within: float) -> list[int]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return []
        time.sleep(0.2)
    return alive


def _last(run: Path) -> dict:
    return json.loads((run / "run.json").read_text())["attempts"][-1]


def test_every_process_carries_the_attempts_mark(tmp_path):
    run = tmp_path / "r"
    proc, pids = _start(run)
    mark = _last(run)["mark"]
    try:
        assert set(pids) <= {p.pid for p in marked(mark)}, "the daemon that left its session is found too"
        assert psutil.Process(pids[0]).environ()[MARK_VAR] == mark
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    assert _gone(pids, 10) == []


@pytest.mark.parametrize(
    ("sig", "state", "reason"),
    [
        (signal.SIGINT, "interrupted", "Ctrl-C"),
        (signal.SIGHUP, "interrupted", "terminal closed"),
        (signal.SIGKILL, "killed", "was killed; its watchdog stopped the"),
    ],
    ids=["SIGINT", "SIGHUP", "SIGKILL"],
)
def test_the_run_ends_with_its_supervisor_however_it_ends(tmp_path, cli, sig, state, reason):
    run = tmp_path / "r"
    proc, pids = _start(run)
    supervisor = proc.pid
    proc.send_signal(sig)
    signalled = time.monotonic()
    proc.wait(timeout=60)
    assert _gone(pids, 30 - (time.monotonic() - signalled)) == [], "the trainer and its daemon"
    # after SIGKILL the watchdog stops what is left (a SIGTERM, 10 s grace, a SIGKILL), then records the end
    deadline = time.monotonic() + 45
    while _last(run).get("state") is None and time.monotonic() < deadline:
        time.sleep(0.2)
    last = _last(run)
    assert last["state"] == state and reason in last["reason"], last
    if sig == signal.SIGKILL:
        assert f"trainctl (PID {supervisor}) was killed" in last["reason"]
    row = cli("runs", "ls", "--dir", str(tmp_path)).stdout
    assert f"{state} ({last['reason']}" in " ".join(row.split()), row


def test_runs_stop_stops_a_run_started_elsewhere(tmp_path, cli):
    run = tmp_path / "r"
    proc, pids = _start(run)
    result = cli("runs", "stop", str(run), "--grace", "20")
    assert result.exit_code == 0, result.output
    assert "stopped r (attempt 1: interrupted)" in result.stdout
    assert f"Continue it: trainctl train --resume {run}" in result.stdout
    assert proc.wait(timeout=30) == 130
    assert _gone(pids, 10) == []
    assert _last(run)["reason"] == "stopped by trainctl runs stop"

    again = cli("runs", "stop", str(run))
    assert again.exit_code == 1
    assert "Error: r is not running (state: interrupted)." in again.stderr


def test_runs_stop_finishes_what_a_killed_supervisor_left(tmp_path, cli):
    """A supervisor killed before its watchdog existed (or with the watchdog gone too): runs stop cleans up."""
    run = tmp_path / "r"
    proc, pids = _start(run)
    watchdogs = processes_with(psutil.Process(proc.pid).children(), "trainctl.launch.watchdog")
    for w in watchdogs:
        w.kill()
    proc.kill()
    proc.wait(timeout=10)
    assert "killed (trainctl (PID" in " ".join(cli("runs", "ls", "--dir", str(tmp_path)).stdout.split())
    result = cli("runs", "stop", str(run))
    assert result.exit_code == 0, result.output
    assert "r was not running, but" in result.stdout
    assert _gone(pids, 20) == []
    assert _last(run)["state"] == "killed"


def test_a_second_trainctl_for_the_same_run_is_refused(tmp_path):
    from trainctl.errors import TrainctlError
    from trainctl.launch.rundir import RunDir

    run = tmp_path / "r"
    proc, _ = _start(run)
    try:
        with pytest.raises(TrainctlError) as e:
            RunDir(run).lock()
        assert f"is in use: trainctl (PID {proc.pid}) is running it" in e.value.message
        assert RunDir(run).locked()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    assert not RunDir(run).locked()  # the kernel released it with its holder
    RunDir(run).lock().release()


def test_runs_write_nothing_outside_their_folder_and_trainctls_home_and_cache(real_home, grpo_run, sft_run, dpo_run):
    """Every file under the HOME the session's runs had (tests/real_runs.py: HOME is real_home.root), and the
    allowed places: trainctl's home (TRAINCTL_HOME), its caches (TRAINCTL_CACHE: each run's own), the run folders
    (work-NAME/runs/NAME), and what the harness itself writes there (NAME.out, the failed run's dataset class, the
    folders runs were told to dump their validation samples to). The GRPO run started a Ray of its own: Ray 2.60
    would write its token to ~/.ray/auth_token, and verl's datasets an Arrow copy of the data to
    ~/.cache/huggingface/datasets (trainctl.launchers.local.trainer_env_at_start)."""
    root = real_home.root
    names = [w.name.removeprefix("work-") for w in root.glob("work-*")]
    assert {"grpo", "sft", "dpo"} <= set(names), names
    allowed = [root / "home", root / "cache", *root.glob("cache-*"), root / "boom.py", root / "boom-tmp.json"]
    for name in names:
        # NAME-validation: tests.real_runs.validation_dir
        allowed += [root / f"work-{name}" / "runs" / name, root / f"{name}.out", root / f"{name}-validation"]
    outside = []
    # os.walk skips what vanishes under it (the other worker's runs write while this looks)
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if Path(folder, d) not in allowed]
        outside += [str(Path(folder, f).relative_to(root)) for f in files if Path(folder, f) not in allowed]
    assert outside == [], f"written outside the run folders, trainctl's home and caches: {outside[:20]}"


def test_the_trainers_own_ray_gets_a_token_of_its_own_and_a_users_cluster_keeps_its_settings(monkeypatch, tmp_path):
    """What the trainer's environment gets at its start: with a Ray of its own (main_ppo's ray.init()), token
    authentication on with a fresh token in RAY_AUTH_TOKEN, which Ray reads before ~/.ray/auth_token (so it writes
    none); joining the user's cluster (ray_cluster), the user's settings; the datasets cache in trainctl's."""
    from trainctl.launchers.local import trainer_env_at_start

    monkeypatch.setenv("TRAINCTL_CACHE", str(tmp_path / "cache"))
    own = trainer_env_at_start({}, own_ray=True)
    again = trainer_env_at_start({}, own_ray=True)
    assert own["RAY_AUTH_MODE"] == "token" and len(own["RAY_AUTH_TOKEN"]) == 64
    assert own["RAY_AUTH_TOKEN"] != again["RAY_AUTH_TOKEN"], "a token per run"
    assert own["HF_DATASETS_CACHE"] == str(tmp_path / "cache" / "hf-datasets")
    assert own["VLLM_CACHE_ROOT"] == str(tmp_path / "cache" / "vllm") and own["VLLM_NO_USAGE_STATS"] == "1"
    assert own["WANDB_CACHE_DIR"] == str(tmp_path / "cache" / "wandb")
    user = {"RAY_AUTH_MODE": "token", "HF_HOME": "/data/hf", "VLLM_CACHE_ROOT": "/data/vllm", "VLLM_CONFIG_ROOT": "/c"}
    user["WANDB_CACHE_DIR"] = "/data/wandb"
    joined = trainer_env_at_start(user, own_ray=False)
    assert joined == {"VLLM_NO_USAGE_STATS": "1"}, (
        "a cluster the trainer joins, and caches the user chose, are the user's"
    )
    assert "RAY_AUTH_TOKEN" not in trainer_env_at_start({"RAY_AUTH_MODE": "disabled"}, own_ray=True)
    # its temporary files go to the attempt's folder (trainctl.scratch), the user's TMPDIR stands
    attempt = trainer_env_at_start({}, own_ray=True, scratch=tmp_path / "cache" / "tmp" / "abcd-1")
    assert attempt["TMPDIR"] == str(tmp_path / "cache" / "tmp" / "abcd-1") and attempt["RAY_TMPDIR"] == "/tmp"
    assert "TMPDIR" not in own and "TMPDIR" not in trainer_env_at_start({"TMPDIR": "/t"}, True, tmp_path)
    # vLLM's sockets, with a Ray of its own (this machine), in a cache whose path fits a socket's (tmp_path's may not)
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tc-") as short:
        monkeypatch.setenv("TRAINCTL_CACHE", short)
        assert trainer_env_at_start({}, own_ray=True)["VLLM_RPC_BASE_PATH"] == f"{short}/vllm-rpc"
        assert "VLLM_RPC_BASE_PATH" not in trainer_env_at_start({}, own_ray=False)
