"""trainctl's fork server for a CPU run's Ray workers (trainctl.runtime.forkserver), driven as Ray drives it: each
worker starts as `PYTHON -S forkserver_client.py WORKER ARGS` (tests/runtime/forkserver_harness.py). The real thing,
with Ray and verl, is every GRPO run of the suite (hardware=cpu forks its workers): tests/launch/test_ppo.py checks
one."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

HARNESS = Path(__file__).with_name("forkserver_harness.py")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    out = tmp_path_factory.mktemp("forkserver")
    proc = subprocess.run(
        [sys.executable, str(HARNESS), str(out)], capture_output=True, text=True, timeout=180, cwd=out
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    report["by_case"] = {r["case"]: r for r in report["results"]}
    report["stdout"], report["stderr"] = proc.stdout, proc.stderr
    return report


def test_a_worker_is_a_fork_of_the_server_with_its_own_arguments_environment_and_directory(served, tmp_path):
    first = served["by_case"]["first"]
    server = first["ppid"]
    assert server not in (first["client_pid"], served["driver"])  # the server's child, not the client's
    assert first["preloaded"] and first["main"] == "__main__"
    assert first["argv"][1:] == ["exit=3"] and first["worker_var"] == "one"
    assert first["cwd"] == str(Path(first["argv"][0]).parent)
    # its exit code is its client's, which is what Ray's raylet started and watches
    assert first["client_code"] == 3
    # its standard streams are its client's
    assert f"worker {first['pid']} says hello" in served["stdout"]


def test_the_server_loads_the_workers_modules_once_the_first_has_asked(served):
    by_case = served["by_case"]
    assert not by_case["first"]["second_stage"]  # forked before: it imports them itself
    assert by_case["second"]["second_stage"] and by_case["second"]["ppid"] == by_case["first"]["ppid"]
    assert by_case["second"]["worker_var"] == "two"  # each worker has its own environment, not the first's


def test_a_fork_collects_its_own_garbage_and_leaves_what_the_server_loaded_frozen(served):
    """The server pauses the collector while it imports and freezes what it holds before it forks
    (trainctl.import_cost.collector_paused): a fork's collections walk only what the fork made."""
    first, second = served["by_case"]["first"], served["by_case"]["second"]
    assert first["gc_enabled"] and second["gc_enabled"]
    assert first["frozen"] > 1000 and second["frozen"] > first["frozen"], (first["frozen"], second["frozen"])


def test_forks_draw_distinct_ray_ids_though_the_server_defined_ray_actor_classes(served):
    """Ray seeds its ID generator once a process, from a pool a fork copies: a worker forked after the server drew an
    ID would draw its siblings' IDs (duplicate task IDs crash the actor they call). The server's imports draw none."""
    ids = [served["by_case"][case]["ray_id"] for case in ("second", "third", "terminated")]
    assert len(set(ids)) == 3, ids
    assert "ID generator was seeded" not in served["stderr"]


def test_a_worker_whose_imports_would_differ_or_that_finds_no_server_starts_as_a_fresh_python(served):
    for case in ("other_path", "no_server"):
        fresh = served["by_case"][case]
        assert fresh["pid"] == fresh["client_pid"], case  # the client became the worker (exec)
        assert not fresh["preloaded"] and fresh["client_code"] == 0
    assert "declined a worker (PYTHONPATH differs)" in served["stderr"]


def test_a_signal_to_the_client_reaches_its_worker_and_the_client_ends_as_the_worker_did(served):
    stopped = served["by_case"]["terminated"]
    assert stopped["ppid"] != stopped["client_pid"]
    assert stopped["client_code"] == -15  # SIGTERM, passed on and reported as the worker's own end
    assert not psutil.pid_exists(stopped["pid"]) or psutil.Process(stopped["pid"]).status() == psutil.STATUS_ZOMBIE


def test_the_server_ends_with_its_driver(served):
    server = served["by_case"]["first"]["ppid"]
    # the harness (the driver) has exited: the server was told to follow it (PR_SET_PDEATHSIG)
    deadline = time.monotonic() + 10
    while psutil.pid_exists(server) and psutil.Process(server).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the fork server outlived its driver"
        time.sleep(0.1)


def test_ray_starts_a_drivers_workers_through_trainctls_setup_worker_without_importing_ray(served):
    """Ray runs `PYTHON setup_worker.py WORKER ARGS --serialized-runtime-env-context=... --language=PYTHON` for each
    worker: trainctl's (the driver's, run_driver) sets the context's variables as Ray does and asks the server."""
    worker = served["by_case"]["setup"]
    assert worker["ppid"] == served["by_case"]["first"]["ppid"]  # a fork of the server
    assert worker["argv"][1:] == ["exit=4"] and worker["client_code"] == 4  # Ray's own arguments taken out
    assert worker["worker_var"] == "from-the-raylet-"  # ${X} from the environment, an unset one left out
    # a context it does not handle (a command prefix) goes to Ray's setup_worker.py, which applies it
    by_ray = served["by_case"]["setup_by_ray"]
    assert by_ray["worker_var"] == "prefixed" and by_ray["client_code"] == 0


DRIVER_DIR = Path(__file__).parent


@pytest.mark.parametrize(("action", "code"), [("3", 3), ("raise", 1)])
def test_a_python_m_driver_runs_in_the_servers_parent_and_ends_what_it_started(action, code, tmp_path):
    """`python -m trainctl.runtime.forkserver -- python -m MODULE` runs MODULE in its own process (the PID trainctl
    started) with Ray's setup_worker set to trainctl's, and on its end stops its processes together: SIGTERM, then
    SIGKILL for those that ignore it (Ray's GCS and raylet take seconds), with the module's exit code."""
    report = tmp_path / "driver.json"
    cmd = [sys.executable, "-m", "trainctl.runtime.forkserver", "--", sys.executable, "-m", "forkserver_driver"]
    env = {**__import__("os").environ, "PYTHONPATH": str(DRIVER_DIR)}
    proc = subprocess.run([*cmd, str(report), action], capture_output=True, text=True, timeout=60, env=env)
    ended = time.monotonic()
    assert proc.returncode == code, proc.stderr[-2000:]
    facts = json.loads(report.read_text())
    assert facts["name"] == "__main__" and facts["argv"] == [str(report), action]
    assert facts["setup_worker"].endswith("trainctl/runtime/forkserver_setup.py")
    assert "the driver's last line" in proc.stdout
    if action == "raise":
        assert "RuntimeError: the driver failed" in proc.stderr
    for pid in facts["children"]:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    # from the driver's end to the command's: the stubborn child killed after the grace, not waited for (it sleeps
    # 120 s); counted from the driver's end, not the command's start, which a loaded machine's imports stretch
    assert ended - facts["ending"] < 10


def test_a_run_that_uses_vllm_gets_verls_vllm_server_preloaded_and_one_without_does_not():
    """The second stage's modules: a run trainctl marks as using no vLLM (TRAINCTL_NO_VLLM=1) is spared vLLM's
    imports; any other gets verl's vLLM server module, which five of its processes would import each."""
    from trainctl.runtime import forkserver

    workers, vllm = ("a", "b"), ("verl.workers.rollout.vllm_rollout.vllm_async_server",)
    assert forkserver.stage_two({"TRAINCTL_NO_VLLM": "1"}, workers, vllm) == workers
    assert forkserver.stage_two({}, workers, vllm) == (*workers, *vllm)
    assert vllm == forkserver.VLLM_WORKER_MODULES
    # a run with MCP servers (trainctl.launch.tools sets TRAINCTL_MCP_SERVERS): the SDK its agent-loop workers use
    mcp, tools = forkserver.MCP_WORKER_MODULES, {"TRAINCTL_NO_VLLM": "1", "TRAINCTL_MCP_SERVERS": "1"}
    assert forkserver.stage_two(tools, workers, vllm) == (*workers, *mcp)
