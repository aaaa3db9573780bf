"""hardware.launcher=slurm against a real Slurm (tests/launchers/slurm_daemons.py: slurmctld and two slurmd, node1
and node2, on this host), through the real CLI: the plan's and doctor's checks before sbatch, runs across the two
nodes, state from Slurm, stop, logs and resume. No mock scheduler."""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import time
from pathlib import Path

import pytest

from tests.real_runs import FAST_SFT
from trainctl.launchers.slurm_cluster import minutes
from trainctl.paths import cache_dir

SLURM = ["hardware.launcher=slurm"]
# the quickstart, 4 steps, no validation: the shortest real SFT run
SHORT_SFT = ["recipe=quickstart", "run.max_steps=4", "run.val_every=null", *SLURM]


def _status(work: Path, name: str) -> dict:
    return json.loads((work / "runs" / name / "run.json").read_text())


def test_slurms_time_forms():
    assert [minutes(t) for t in ("90", "1:30", "01:00:00", "2-0", "1-12:30", "0-0:0:30", "UNLIMITED")] == [
        90,
        1.5,
        60,
        2880,
        2190,
        0.5,
        None,
    ]
    for bad in ("1h", "tomorrow", "1:2:3:4"):
        with pytest.raises(ValueError):
            minutes(bad)


def test_the_ppo_familys_script_starts_ray_on_every_node_before_the_trainer(tmp_path):
    """What the job runs, read without running it: its options, the run's environment without its secrets, a Ray head
    on the first node and a worker on each other one (each node's ports a block of its own), the wait for every node,
    then the trainer on the first node; bash accepts it."""
    import subprocess

    from trainctl.launchers.base import Job
    from trainctl.launchers.slurm import script

    job = Job(["/venv/bin/python", "-m", "verl.trainer.main_ppo", "x=1"], {}, {"A": "1", "HF_TOKEN": "hf_x"}, "r")
    hw = {"nnodes": 2, "gpus_per_node": 8, "device": "cuda", "ray_num_cpus": None}
    hw["slurm"] = {"partition": "gpu", "time": "04:00:00", "ray_port": 6379, "setup": ["module load cuda"]}
    hw["slurm"]["extra_args"] = ["--exclusive"]
    log = tmp_path / "a run" / "logs" / "attempt-1.log"
    text = script(job, hw, log, log.with_suffix(".exit"), ["recipe=x"])
    for line in (
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=1",
        f'#SBATCH --output="{log}"',
        "#SBATCH --partition=gpu",
        "#SBATCH --time=04:00:00",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --exclusive",
        "module load cuda",
        "export A=1",
        'export RAY_ADDRESS="$head_ip:$ray_port"',
        "export RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S=0",
        'srun --overlap --nodes=1 --ntasks=1 -w "$head" /venv/bin/python -m verl.trainer.main_ppo x=1',
    ):
        assert line in text.splitlines(), line
    assert "hf_x" not in text and "--num-gpus=8" in text and "$(ray_ports $i)" in text
    assert text.index("ray_ports 0) &") < text.index("$(ray_ports $i) &") < text.index("srun --overlap")
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


def test_a_tmpdir_the_user_chose_stands_in_the_job(tmp_path):
    """Without one, the job sends the trainer's temporary files to a folder of its own under trainctl's cache (Slurm
    would give it /tmp); with the user's TMPDIR in the environment sbatch runs in, the script leaves it alone."""
    from trainctl.launchers.base import Job
    from trainctl.launchers.slurm import script

    hw = {"nnodes": 1, "gpus_per_node": 1, "device": "cpu", "ray_num_cpus": None, "slurm": {}}
    log = tmp_path / "logs" / "attempt-1.log"
    texts = [script(Job(["python", "-m", "x"], env, {}, "r"), hw, log, log.with_suffix(".exit"), []) for env in (
        {}, {"TMPDIR": "/scratch/me"})]  # fmt: skip
    assert f'  job_tmp={cache_dir() / "tmp"}/job-"$SLURM_JOB_ID"' in texts[0].splitlines()
    assert "TMPDIR" not in texts[1] and "remove_job_tmp() { :; }" in texts[1].splitlines()


def test_a_time_or_option_sbatch_would_refuse_is_an_error_of_the_plan(cli, no_processes):
    bad = cli("config", "validate", *SHORT_SFT, "hardware.slurm.time=2h", "hardware.slurm.extra_args=[exclusive]")
    assert bad.exit_code == 1
    assert "hardware.slurm.time = '2h' is not a time Slurm reads." in bad.stderr
    assert "hardware.slurm.extra_args: 'exclusive' is not an sbatch option (they start with -)." in bad.stderr
    typo = cli("config", "validate", *SHORT_SFT, "hardware.slurm.partion=gpu")
    assert typo.exit_code == 1 and "Did you mean 'hardware.slurm.partition'?" in typo.stderr


def test_without_slurm_on_the_path_nothing_is_submitted(cli, tiny_model, arith_data, monkeypatch, tmp_path):
    bare = tmp_path / "bin"
    bare.mkdir()
    monkeypatch.setenv("PATH", str(bare))  # torchrun is found beside this interpreter, Slurm nowhere
    result = cli("train", *SHORT_SFT, "run.name=nopath")
    assert result.exit_code == 1, result.output
    assert "Slurm's commands are not on the PATH: sbatch, squeue, scontrol, scancel, sinfo." in result.stderr
    assert "apt-get install slurm-client" in result.stderr
    assert not (tmp_path / "work" / "runs" / "nopath" / "run.json").exists()


def test_doctor_checks_the_partition_its_nodes_and_limits(cli, slurm, tiny_model, arith_data):
    fine = cli("doctor", *SHORT_SFT, "hardware.nnodes=2", "hardware.slurm.time=30")
    assert fine.exit_code == 0, fine.output
    assert "partition debug: 2 node(s): node1" in fine.stdout and "MaxNodes=2, MaxTime=01:00:00" in fine.stdout
    assert "wants 2 node(s) x 1 process(es), time 30: the partition has room" in fine.stdout
    bad = cli("doctor", *SHORT_SFT, "hardware.nnodes=4", "hardware.slurm.time=2:00:00")
    assert bad.exit_code == 1
    assert "hardware.nnodes = 4: Slurm partition debug takes at most 2 node(s) a job (MaxNodes=2)." in bad.stdout
    assert "allows a job at most 01:00:00 (120 > 60 minutes)" in bad.stdout
    missing = cli("doctor", *SHORT_SFT, "hardware.slurm.partition=gpu")
    assert missing.exit_code == 1
    assert "hardware.slurm.partition = 'gpu': the Slurm cluster has no such partition (partitions: debug)" in (
        missing.stdout
    )


def test_a_job_slurm_has_forgotten_is_read_from_the_exit_code_it_wrote(slurm, tmp_path):
    """After MinJobAge Slurm no longer knows an ended job (no accounting database here): a detached run's state is
    the exit code its script wrote beside its log, and when that file's time says."""
    from trainctl.launchers import get

    launcher = get("slurm")
    exit_file = tmp_path / "attempt-1.exit"
    attempt = {"launcher": "slurm", "job_id": "987654", "exit_file": str(exit_file)}
    assert launcher.status("submitted", attempt, {}).status == "unknown"
    exit_file.write_text("0\n")
    done = launcher.status("submitted", attempt, {})
    assert (done.status, done.exit_code, done.ended) == ("done", 0, exit_file.stat().st_mtime)
    exit_file.write_text("3\n")
    assert (launcher.status("submitted", attempt, {}).status, launcher.status("submitted", attempt, {}).exit_code) == (
        "failed",
        3,
    )


def test_a_run_the_partition_cannot_host_is_refused_before_sbatch(cli, slurm, tiny_model, arith_data):
    cases = {
        "hardware.slurm.partition=gpu": "the Slurm cluster has no such partition (partitions: debug).",
        "hardware.nnodes=4": "hardware.nnodes = 4: Slurm partition debug takes at most 2 node(s) a job",
        "hardware.slurm.time=1-0": "hardware.slurm.time = 1-0: Slurm partition debug allows a job at most 01:00:00",
        "hardware.slurm.cpus_per_node=4096": "hardware.slurm.cpus_per_node = 4096: Slurm partition debug has 0 node(s)",
    }
    for i, (override, said) in enumerate(cases.items()):
        result = cli("train", *SHORT_SFT, override, f"run.name=refused-{i}")
        assert result.exit_code == 1, result.output
        assert said in result.stderr, result.stderr
    assert slurm.jobs() == [], "nothing was submitted"


# its setup may wait for the session's run it compares with (made by another worker): the suite's 600 s is too short
@pytest.mark.timeout(1800)
def test_sft_across_two_slurm_nodes_learns_as_two_processes_on_one_node_do(
    cli, slurm, tiny_model, arith_data, tmp_path, sft_ws2_run
):
    """The default suite's Slurm run: verl's SFT with torchrun on node1 and node2 (two agents, one c10d rendezvous
    on node1), followed to its end; the run folder holds the script that ran, runs ls and runs logs read it. Its
    losses are those of the session's run of the same config with both processes on one machine (sft_ws2_run): the
    same batches, the same all-reduce."""
    from trainctl.metrics import read_metrics

    work = tmp_path / "work"
    locks_before = set(Path(tempfile.gettempdir()).glob("ckpt_*.lock"))
    result = cli("train", *FAST_SFT, *SLURM, "hardware.nnodes=2", "run.name=sft2")
    assert result.exit_code == 0, result.output[-3000:]
    assert "Finished sft2" in result.stdout
    status = _status(work, "sft2")
    attempt = status["attempts"][-1]
    assert (status["state"], attempt["launcher"], attempt["job_state"]) == ("finished", "slurm", "COMPLETED")
    script = (work / "runs" / "sft2" / "slurm.sbatch").read_text()
    assert "#SBATCH --nodes=2" in script and "PET_RDZV_ENDPOINT" in script and "torchrun --nnodes=2" in script
    log = (work / "runs" / "sft2" / "logs" / "attempt-1.log").read_text()
    for node, rank in (("node1", 0), ("node2", 1)):
        assert f"trainctl: node {node} (node rank {rank}) starts torchrun" in log
    # verl's lock file per checkpoint folder (ckpt_<hash>.lock), torchrun's logs: in the job's folder under trainctl's
    # cache, gone with the job; /tmp got none (no other test of the suite writes them there)
    (job_tmp,) = re.findall(r"trainctl: the trainer's temporary files go to (\S+), removed", log)
    assert Path(job_tmp).parent == cache_dir() / "tmp" and not Path(job_tmp).exists(), job_tmp
    assert set(Path(tempfile.gettempdir()).glob("ckpt_*.lock")) <= locks_before
    step = work / "runs" / "sft2" / "checkpoints" / "global_step_4"
    assert {p.name for p in step.glob("model_world_size_2_rank_*.pt")} == {
        "model_world_size_2_rank_0.pt",
        "model_world_size_2_rank_1.pt",
    }, "two ranks trained, one on each node"
    assert (work / "runs" / "sft2" / "logs" / "attempt-1.exit").read_text().strip() == "0"
    two_nodes, one_node = read_metrics(work / "runs" / "sft2"), read_metrics(sft_ws2_run.path)
    losses = [(two_nodes[s]["train/loss"], one_node[s]["train/loss"]) for s in (1, 2, 3, 4)]
    assert all(abs(a - b) < 1e-4 for a, b in losses), losses
    row = next(line for line in cli("runs", "ls").stdout.splitlines() if line.startswith("sft2 "))
    assert " done " in row and "4/4" in row, row
    assert "trainctl: the trainer exited with code 0" in cli("runs", "logs", "sft2").stdout
    assert [j for j in slurm.jobs() if j.endswith("RUNNING")] == []


@pytest.mark.slow
def test_the_quickstart_through_slurm(cli, slurm, tiny_model, arith_data, tmp_path):
    """`trainctl train recipe=quickstart hardware.launcher=slurm` as docs/guides/clusters.md shows it: 48 steps,
    validated."""
    result = cli("train", "recipe=quickstart", *SLURM)
    assert result.exit_code == 0, result.output[-3000:]
    status = _status(tmp_path / "work", "quickstart")
    assert status["state"] == "finished" and status["attempts"][-1]["job_state"] == "COMPLETED"
    assert "val/loss" in result.stdout


def _wait_for(what, check, seconds: float = 600):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(2)
    raise AssertionError(f"{what} did not happen within {seconds:.0f} s")


@pytest.mark.slow
@pytest.mark.timeout(2400)  # two GRPO jobs (a few minutes each on 2 busy cores)
def test_a_detached_grpo_run_runs_stops_leaving_nothing_and_resumes(cli, slurm, tiny_model, arith_data, tmp_path):
    """--detach returns once sbatch has answered; runs ls and the server say running (from Slurm); runs stop ends
    the job (no job, no process of it left); --resume continues from its last checkpoint to done."""
    from tests.serve.conftest import start_server
    from trainctl.launchers.tree import marked

    work = tmp_path / "work"
    grpo = ["recipe=grpo-arith-tiny-cpu", *SLURM, "run.max_steps=6", "run.save_every=1", "run.name=grpo-d"]
    started = cli("train", *grpo, "--detach")
    assert started.exit_code == 0, started.output
    assert "stop it:   trainctl runs stop runs/grpo-d" in started.stdout
    job_id = _status(work, "grpo-d")["attempts"][-1]["job_id"]

    def row() -> str:
        return next(line for line in cli("runs", "ls").stdout.splitlines() if line.startswith("grpo-d "))

    assert " running (Slurm job " in _wait_for("running", lambda: next((r for r in [row()] if " running " in r), None))
    server = start_server([work / "runs"], {**os.environ}, work, log=tmp_path / "serve.log")
    try:
        with server.client() as api:
            job = next(j for j in api.get("/api/jobs").json() if j["name"] == "grpo-d")
            assert job["status"] == "running", job
    finally:
        server.stop()
    again = cli("train", "--resume", "runs/grpo-d")
    assert again.exit_code == 1 and f"grpo-d still runs as Slurm job {job_id} (running)." in again.stderr, again.output
    checkpoints = work / "runs" / "grpo-d" / "checkpoints"
    _wait_for("a checkpoint", lambda: (checkpoints / "global_step_1").is_dir() or " running " not in row())
    assert (checkpoints / "global_step_1").is_dir(), cli("runs", "logs", "grpo-d").stdout[-3000:]
    mark = _status(work, "grpo-d")["attempts"][-1]["mark"]
    stopped = cli("runs", "stop", "grpo-d", "--grace", "20")
    assert stopped.exit_code == 0, stopped.output
    assert f"stopped grpo-d (Slurm job {job_id})\n" in stopped.stdout, "no leftovers, the job ended"
    # its steps stopped on SIGTERM, so its script exited non-zero: Slurm says FAILED (CANCELLED after scancel's KILL)
    assert [j for j in slurm.jobs() if j.split()[0] == job_id] in ([], [f"{job_id} FAILED"], [f"{job_id} CANCELLED"])
    assert marked(mark) == [], "no process of the job is left"
    assert " interrupted " in row()
    last = int((checkpoints / "latest_checkpointed_iteration.txt").read_text())

    resumed = cli("train", "--resume", "runs/grpo-d")
    assert resumed.exit_code == 0, resumed.output[-3000:]
    status = _status(work, "grpo-d")
    assert [a["state"] for a in status["attempts"]] == ["interrupted", "finished"]
    second = [json.loads(line)["step"] for line in (work / "runs" / "grpo-d" / "metrics" / "attempt-2.jsonl").open()]
    assert second[0] == last + 1 and second[-1] == 6, second
    assert " done " in row()


@pytest.mark.slow
def test_runs_stop_reaches_the_trainctl_that_follows_the_job(cli, slurm, tiny_model, arith_data, tmp_path):
    """A job followed in a terminal: `runs stop` elsewhere asks that trainctl (as Ctrl-C would), which cancels the
    job, records why and exits 130; nothing of the job is left."""
    import subprocess
    import sys

    from trainctl.launchers.tree import marked

    work = tmp_path / "work"
    argv = [sys.executable, "-m", "trainctl", "train", "recipe=quickstart", *SLURM, "run.name=fg"]
    follower = subprocess.Popen(argv, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        metrics = work / "runs" / "fg" / "metrics" / "attempt-1.jsonl"
        _wait_for("a step", lambda: metrics.is_file() or follower.poll() is not None)
        assert follower.poll() is None, follower.stderr.read()
        attempt = _status(work, "fg")["attempts"][-1]
        stopped = cli("runs", "stop", "fg", "--grace", "10")
        assert stopped.exit_code == 0, stopped.output
        assert f"stopped fg (Slurm job {attempt['job_id']})" in stopped.stdout
        assert follower.wait(timeout=120) == 130
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    assert "interrupted (stopped by trainctl runs stop)" in follower.stderr.read()
    ended = _status(work, "fg")["attempts"][-1]
    assert (ended["state"], ended["reason"]) == ("interrupted", "stopped by trainctl runs stop")
    assert ended["job_state"] in ("FAILED", "CANCELLED")
    assert marked(attempt["mark"]) == []
    assert [j for j in slurm.jobs() if j.endswith("RUNNING")] == []


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_node_set_down_mid_job_ends_the_run_with_slurms_verdict_and_resume_trains_the_rest(
    cli, slurm, tiny_model, arith_data, tmp_path
):
    """A GRPO job followed in the foreground; its node is set DOWN after its first checkpoint (as an administrator,
    or Slurm's health check, does to a failed node). Slurm ends the job NODE_FAIL (trainctl submits with
    --no-requeue: Slurm's default would requeue it to wait for a node that may not come back); trainctl exits 3
    naming the node; once the node is back, --resume trains the remaining steps."""
    import subprocess
    import sys

    work = tmp_path / "work"
    grpo = ["recipe=grpo-arith-tiny-cpu", *SLURM, "run.max_steps=30", "run.save_every=2", "run.name=grpo-down"]
    proc = subprocess.Popen([sys.executable, "-m", "trainctl", "train", *grpo], cwd=work, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    checkpoints = work / "runs" / "grpo-down" / "checkpoints"
    try:
        _wait_for("a checkpoint", lambda: (checkpoints / "latest_checkpointed_iteration.txt").is_file())
        job_id = _status(work, "grpo-down")["attempts"][-1]["job_id"]
        node = slurm.run("squeue", "-h", "-j", job_id, "-o", "%N").strip()
        slurm.run("scontrol", "update", f"nodename={node}", "state=DOWN", "reason=trainctl-fault-test")
        downed = time.monotonic()
        out, _ = proc.communicate(timeout=300)
    finally:
        for name in ("node1", "node2"):  # the session's Slurm, as the other tests need it
            with contextlib.suppress(subprocess.CalledProcessError):
                slurm.run("scontrol", "update", f"nodename={name}", "state=RESUME")
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, out[-3000:]
    assert time.monotonic() - downed < 60
    assert f"Slurm ended the job: a node it ran on failed (NODE_FAIL, on {node})" in out, out[-3000:]
    assert "the last whole checkpoint is step" in out
    attempt = _status(work, "grpo-down")["attempts"][-1]
    assert attempt["job_state"] == "NODE_FAIL" and attempt["cause"] == "a Slurm node failed"
    row = next(line for line in cli("runs", "ls").stdout.splitlines() if line.startswith("grpo-down "))
    assert "failed (exit" in row and "a Slurm node failed" in row, row
    last = int((checkpoints / "latest_checkpointed_iteration.txt").read_text())

    _wait_for(f"{node} back", lambda: "idle" in slurm.run("sinfo", "-h", "-n", node, "-o", "%T"), 60)
    resumed = cli("train", "--resume", "runs/grpo-down", f"run.max_steps={last + 2}")
    assert resumed.exit_code == 0, resumed.output[-3000:]
    second = [json.loads(line)["step"] for line in (work / "runs" / "grpo-down" / "metrics" / "attempt-2.jsonl").open()]
    assert second[0] == last + 1, second
