"""trainctl.launchers.vitals through the supervisor: a stand-in trainer whose dependency (a real process under the title
a verl run's has, here trainctl's hf rollout server) dies, stops, or is killed by the kernel's OOM killer; and a run
that stops stepping. Each ends in one verdict, within the watch's seconds, and only what failed first is blamed.
The same with a real GRPO run: tests/launch/test_faults_inside.py."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from tests.shared import memory_cgroup, memory_cgroup_v1
from trainctl.launchers import supervisor as supervisor_module
from trainctl.launchers import vitals as vitals_module
from trainctl.launchers.supervisor import Supervisor
from trainctl.launchers.vitals import Vitals, _dying, role_of

SERVER = "ray::HFRolloutServer"


@pytest.fixture(autouse=True)
def quick_sampling(monkeypatch):
    monkeypatch.setattr(supervisor_module, "WATCH_SECONDS", 0.3)


def stand_in(then: str, start: str = "") -> list[str]:
    """A trainer that starts a process titled as trainctl's rollout server, lets it be seen, then does `then`."""
    code = textwrap.dedent(
        f"""
        import os, signal, subprocess, sys, time
        {start}
        server = subprocess.Popen(["bash", "-c", 'exec -a "{SERVER}" sleep 600'])
        print("server", server.pid, flush=True)
        time.sleep(1.5)
        """
    ) + textwrap.dedent(then)
    return [sys.executable, "-c", code]


def supervise(tmp_path: Path, argv: list[str], **watch) -> tuple[supervisor_module.Outcome, float]:
    vitals = Vitals(**{"dead": 1.0, "stopped": 1.0, "stall": None, **watch})
    started = time.monotonic()
    outcome = Supervisor(argv, {"PATH": os.environ["PATH"]}, tmp_path / "a.log", echo=io.StringIO(),
                         vitals=vitals).run()  # fmt: skip
    return outcome, time.monotonic() - started


def test_the_roles_are_told_by_the_titles_a_verl_run_has():
    assert role_of(["ray::HFRolloutServer"]) == ("trainctl's hf rollout server", "HFRolloutServer")
    assert role_of(["ray::WorkerDict.actor_rollout_ref_update_actor"])[1] == "WorkerDict"
    assert role_of(["VLLM::EngineCore_DP0"])[1] == "VLLM::EngineCore"
    assert role_of(["/venv/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet", "--x=1"])[1] == "raylet"
    assert role_of(["ray::IDLE"]) is None and role_of(["python", "-m", "verl.trainer.main_ppo"]) is None


def test_a_trainer_that_waits_for_a_dead_server_is_ended_with_a_verdict_naming_it(tmp_path):
    outcome, took = supervise(tmp_path, stand_in("server.kill()\ntime.sleep(600)\n"))
    f = outcome.fault
    assert f is not None and f.kind == "died" and f.name == "HFRolloutServer" and f.ended_by_trainctl
    assert outcome.exit_code != 0 and took < 20
    assert "trainctl's hf rollout server (HFRolloutServer, PID" in f.verdict()
    assert "so trainctl ended the run" in f.verdict() and f.cause() == "trainctl's hf rollout server died"


def test_a_stopped_server_ends_the_run_after_the_watchs_seconds(tmp_path):
    outcome, took = supervise(tmp_path, stand_in("os.kill(server.pid, signal.SIGSTOP)\ntime.sleep(600)\n"))
    f = outcome.fault
    assert f is not None and f.kind == "stopped" and f.ended_by_trainctl, outcome.tail
    assert "was stopped (SIGSTOP or frozen) since" in f.verdict() and took < 20
    assert not [p for p in psutil.process_iter(["cmdline"]) if (p.info["cmdline"] or [""])[0] == SERVER
                and p.ppid() == os.getpid()]  # fmt: skip


def test_the_trainers_own_failure_after_the_death_names_the_death(tmp_path):
    fails = (
        "server.kill(); server.wait(); time.sleep(0.5)\n"
        "print('Traceback (most recent call last):'); "
        "print(f'ray.exceptions.ActorDiedError: The actor died unexpectedly. pid: {server.pid}'); sys.exit(1)\n"
    )
    outcome, _ = supervise(tmp_path, stand_in(fails), dead=60.0)
    assert outcome.exit_code == 1
    assert outcome.fault is not None and outcome.fault.name == "HFRolloutServer" and not outcome.fault.ended_by_trainctl


def test_a_failure_that_came_first_is_not_blamed_on_the_processes_that_went_with_it(tmp_path):
    """An error in the trainer itself, after which its processes end (as ray.shutdown ends a run's actors): the
    deaths are its consequence, and the verdict is the trainer's own."""
    fails = (
        "print('Traceback (most recent call last):', flush=True); print('ValueError: a bad reward', flush=True)\n"
        "time.sleep(3); server.kill(); server.wait(); time.sleep(1); sys.exit(1)\n"
    )
    outcome, _ = supervise(tmp_path, stand_in(fails), dead=60.0)
    assert outcome.exit_code == 1 and outcome.fault is None


def test_a_trainer_that_finishes_after_its_server_ends_finishes(tmp_path):
    outcome, _ = supervise(tmp_path, stand_in("server.kill(); server.wait(); time.sleep(0.5)\n"), dead=60.0)
    assert outcome.exit_code == 0 and outcome.fault is None


def test_a_run_that_stops_stepping_is_ended_as_hung(tmp_path):
    progress = tmp_path / "attempt-1.jsonl"
    code = f"import time, pathlib; pathlib.Path({str(progress)!r}).write_text('{{}}\\n'); time.sleep(600)"
    vitals = Vitals(dead=1.0, stopped=1.0, stall=2.0, progress=progress)
    started = time.monotonic()
    outcome = Supervisor([sys.executable, "-c", code], {"PATH": os.environ["PATH"]}, tmp_path / "a.log",
                         echo=io.StringIO(), vitals=vitals).run()  # fmt: skip
    assert outcome.fault is not None and outcome.fault.kind == "stall" and time.monotonic() - started < 15
    assert outcome.fault.verdict().startswith("no training step for 2 s (the last at ")
    assert "run.watch.stall" in outcome.fault.hint()


@pytest.mark.skipif(memory_cgroup_v1() is None, reason="no writable cgroup v1 memory controller on this machine")
def test_a_worker_the_kernels_oom_killer_kills_is_named_with_what_it_held(tmp_path):
    """A real OOM kill: the worker runs in a memory cgroup of its own, limited to 150 MiB, and allocates more."""
    with memory_cgroup(150 * 2**20) as group:
        grow = "import time; time.sleep(1.5); b = []\\nwhile True: b.append(bytearray(8 * 2**20)); time.sleep(0.02)"
        start = (
            "worker = subprocess.Popen(['bash', '-c', "
            f"'echo $$ > {group}/cgroup.procs; exec -a ray::WorkerDict {sys.executable} -c \"{grow}\"'])\n"
        )
        outcome, _ = supervise(tmp_path, stand_in("time.sleep(600)\n", start=start))
    f = outcome.fault
    assert f is not None and f.name == "WorkerDict" and f.oom, outcome.tail
    assert f.verdict().startswith("the kernel's OOM killer killed verl's training worker (WorkerDict, PID")
    assert "GiB" in f.verdict() and "data.train_batch_size" in f.hint()


def test_a_sample_taken_while_a_process_is_killed_keeps_what_it_held_and_the_oom_count_before(monkeypatch):
    """The OOM killer counts its kill before it signals, and a loaded host may sample the victim while the kernel
    frees its memory: that sample must not become what it held (0 bytes), nor the count its death is compared with
    (its own kill, read as no OOM: seen once in the full suite on a slow host)."""
    worker = subprocess.Popen(["bash", "-c", "exec -a ray::WorkerDict sleep 600"])
    try:
        deadline = time.monotonic() + 10
        while role_of(psutil.Process(worker.pid).cmdline()) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _dying(worker.pid)
        kills, dying = [0], [False]
        monkeypatch.setattr(vitals_module, "_memory_cgroup", lambda pid: Path("/a/memory/cgroup"))
        monkeypatch.setattr(vitals_module, "oom_kills", lambda cgroup: kills[0])
        monkeypatch.setattr(vitals_module, "_dying", lambda pid: dying[0])
        vitals = Vitals(dead=1.0, stopped=1.0, stall=None)
        vitals.sample([psutil.Process(worker.pid)])
        held = vitals.watched[worker.pid].rss
        kills[0], dying[0] = 1, True  # counted, signalled, not yet gone
        vitals.sample([psutil.Process(worker.pid)])
    finally:
        worker.kill()
        worker.wait()
    assert _dying(worker.pid)  # gone: nothing to read of it
    vitals.sample([])
    fault = vitals.faults[-1]
    assert fault.kind == "died" and fault.name == "WorkerDict" and fault.oom is True and fault.rss == held > 0
