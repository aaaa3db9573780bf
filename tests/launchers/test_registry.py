"""trainctl.launchers: the registry, and a launcher from outside the package (tests/launchers/toy_launcher.py),
installed as a user's package is (an entry point in the group trainctl.launchers), driven through the real CLI:
config validate, train --dry-run, train, runs ls, runs stop."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.shared import install_entry_point
from trainctl import launchers
from trainctl.errors import TrainctlError

TOY = ["recipe=quickstart", "hardware.launcher=toy", "run.name=queued"]
MODULE = "tests.launchers.toy_launcher"


@pytest.fixture(autouse=True)
def registry(monkeypatch):
    """The registry as a new process has it, and so again after the test: the toy module not imported."""
    for name in launchers.BUILTIN:
        launchers.get(name)  # the shipped ones registered before the copy the test may add to
    monkeypatch.setattr(launchers, "_REGISTRY", dict(launchers._REGISTRY))
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    yield
    sys.modules.pop(MODULE, None)


def install(site: Path, monkeypatch, entry: str = MODULE) -> None:
    install_entry_point(site, "toy-queue", "trainctl.launchers", "toy", entry)
    monkeypatch.syspath_prepend(str(site))


def test_the_shipped_launchers_and_an_unknown_name():
    assert launchers.names()[:3] == ["local", "ray_cluster", "ray_job"]
    assert [launchers.get(n).ray for n in ("local", "ray_cluster", "ray_job")] == ["own", "join", "inside"]
    with pytest.raises(TrainctlError) as e:
        launchers.get("ray_jobs")
    assert e.value.message.startswith("hardware.launcher = 'ray_jobs' is not one of: local, ray_cluster, ray_job")
    assert e.value.hint == "hardware.launcher=ray_job"


def test_a_package_whose_launcher_does_not_import(cli, tmp_path, monkeypatch, no_processes):
    install(tmp_path / "site", monkeypatch, "toy_queue_missing.launcher")
    result = cli("config", "validate", "recipe=quickstart", "hardware.launcher=toy")
    assert result.exit_code == 1
    assert "launcher 'toy' does not import: ModuleNotFoundError: No module named 'toy_queue_missing'" in result.stderr
    assert "Hint: fix the package, or uninstall it: pip uninstall toy-queue" in result.stderr


def test_an_installed_launcher_validates_plans_runs_and_stops(cli, tiny_model, arith_data, monkeypatch, tmp_path):
    without = cli("config", "validate", *TOY)
    assert without.exit_code == 1 and "hardware.launcher = 'toy' is not one of" in without.stderr

    install(tmp_path / "site", monkeypatch)
    assert cli("config", "validate", *TOY).exit_code == 0
    plan = cli("train", *TOY, "--dry-run")
    assert plan.exit_code == 0, plan.output
    assert "hardware=cpu (1 node x 1 process, toy)" in plan.stdout

    started = cli("train", *TOY)
    assert started.exit_code == 0, started.output
    ticket = json.loads((tmp_path / "work" / "runs" / "toy-queue" / "queued.json").read_text())
    assert "verl.trainer.sft_trainer" in ticket["argv"], "the backend's command, as the launcher was given it"
    row = next(line for line in cli("runs", "ls").stdout.splitlines() if line.startswith("queued "))
    assert "queued (toy ticket queued.json)" in row, row

    stopped = cli("runs", "stop", "queued")
    assert stopped.exit_code == 0 and "withdrew queued's ticket" in stopped.stdout, stopped.output
    row = next(line for line in cli("runs", "ls").stdout.splitlines() if line.startswith("queued "))
    assert "interrupted (ticket withdrawn)" in row, row
