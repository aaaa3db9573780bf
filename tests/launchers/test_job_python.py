"""trainctl.launchers.job_python: a Ray cluster whose job interpreter lacks the run's packages is found before the job
is submitted. The head is started as a user might by mistake: from a shell whose `python` is not the venv's (a bare
venv's first on its PATH), while `ray` itself is the venv's."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.launchers.ray_head import start_head
from tests.real_runs import FAST_SFT


@pytest.fixture(scope="module")
def bare_head(tmp_path_factory):
    root = tmp_path_factory.mktemp("bare-head")
    bare = root / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    head = start_head(root / "home", path=f"{bare / 'bin'}:/usr/bin:/bin")
    yield head, bare / "bin" / "python"
    head.stop()


@pytest.fixture
def bare_cluster(bare_head, monkeypatch):
    head, python = bare_head
    monkeypatch.setenv("RAY_AUTH_TOKEN", head.token)
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    return head.address, python


def test_a_launch_is_refused_before_the_job_is_submitted(cli, tiny_model, arith_data, bare_cluster, tmp_path):
    from trainctl.launch.lock import versions
    from trainctl.launchers import ray_jobs

    address, python = bare_cluster
    result = cli("train", *FAST_SFT, "run.name=barepy", "hardware.launcher=ray_job", f"hardware.ray_address={address}")
    assert result.exit_code == 1, result.output
    v = versions()
    assert (
        f"Error: the Ray cluster at {address} would run this job with {python} (the `python` on the PATH of the `ray "
        "start` that started it), which lacks verl, torch, transformers, ray and trainctl." in result.stderr
    ), result.stderr
    assert f"the run needs: verl {v['verl']}, torch {v['torch']}, " in result.stderr
    assert "Hint: start the cluster from this run's environment: activate the venv, then `ray start --head" in (
        result.stderr
    )
    assert f"{python} -m pip install 'verl=={v['verl']}'" in result.stderr
    submitted = [job for job in ray_jobs.list_jobs(address) if job.run]
    assert submitted == [], "only trainctl's question was asked: no run's job"
    assert not (tmp_path / "work" / "runs" / "barepy" / "run.json").exists()


def test_doctor_fails_on_the_clusters_python(cli, bare_cluster):
    address, python = bare_cluster
    result = cli("doctor", "recipe=quickstart", "hardware.launcher=ray_job", f"hardware.ray_address={address}")
    assert result.exit_code == 1, result.output
    lines = [" ".join(line.split()) for line in result.stdout.splitlines()]
    line = next((line for line in lines if line.startswith("FAIL job python ")), result.stdout)
    assert f"would run this job with {python} " in line and "which lacks verl, torch" in line, line
    assert any(line.startswith("ok hardware=cpu ") for line in lines), lines
    assert any(line.startswith("ok Ray auth ") for line in lines), lines
    assert "Error: 1 check(s) failed: job python." in result.stderr


def test_versions_are_compared_without_the_build_label():
    """The cluster's answer against the run's lock: another build of the same version (torch 2.13.0+cu128 on the
    cluster, +cpu here) runs the job; another version, or a package it cannot import, does not."""
    from trainctl.errors import Problem
    from trainctl.launchers.job_python import Needs, Verdict, _compare, problem

    want = Needs("torchrun", {"verl": "0.9.1", "torch": "2.13.0+cpu", "peft": "0.21.2"})
    names, modules = ["verl", "torch", "peft"], ["verl", "torch", "peft"]
    answer = {
        "versions": {"verl": "0.9.0", "torch": "2.13.0+cu128", "peft": "0.21.2"},
        "modules": {"verl": True, "torch": True, "peft": False},
        "programs": {"torchrun": None},
    }
    problems = _compare(answer, want, names, modules)
    assert problems == [
        "lacks peft",
        "has verl 0.9.0 where the run's lock.json has 0.9.1",
        "has no `torchrun` on its PATH",
    ]
    answer["versions"]["verl"], answer["modules"]["peft"], answer["programs"]["torchrun"] = "0.9.1", True, "/x/torchrun"
    assert _compare(answer, want, names, modules) == []
    p = problem("http://head:8265", Verdict("/opt/py/bin/python", problems), want)
    assert isinstance(p, Problem) and p.key == "hardware.ray_address"
    assert p.message.endswith(
        "which lacks peft; has verl 0.9.0 where the run's lock.json has 0.9.1; has no `torchrun` on its PATH."
    )
    assert p.hint.endswith("/opt/py/bin/python -m pip install 'verl==0.9.1' 'torch==2.13.0' 'peft==0.21.2'")
