"""trainctl.launchers: the registry, and a launcher from outside the package (tests/launchers/toy_launcher.py)
driven through the real CLI: config validate, train --dry-run, train, runs ls, runs stop."""

from __future__ import annotations

import json

import pytest

from trainctl import launchers
from trainctl.errors import TrainctlError

TOY = ["recipe=quickstart", "hardware.launcher=toy", "run.name=queued"]


@pytest.fixture(autouse=True)
def registry(monkeypatch):
    """What a test registers leaves with it: the registry, the plugin cache and the imported plugin module."""
    import sys

    from trainctl import plugins

    monkeypatch.setattr(launchers, "_REGISTRY", dict(launchers._REGISTRY))
    yield
    plugins._load.cache_clear()
    sys.modules.pop("tests.launchers.toy_launcher", None)


def test_the_shipped_launchers_and_an_unknown_name():
    assert launchers.names()[:3] == ["local", "ray_cluster", "ray_job"]
    assert [launchers.get(n).ray for n in ("local", "ray_cluster", "ray_job")] == ["own", "join", "inside"]
    with pytest.raises(TrainctlError) as e:
        launchers.get("ray_jobs")
    assert e.value.message.startswith("hardware.launcher = 'ray_jobs' is not one of: local, ray_cluster, ray_job")
    assert e.value.hint == "hardware.launcher=ray_job"


def test_a_plugin_that_cannot_be_imported_is_named(cli, monkeypatch, no_processes):
    monkeypatch.setenv("TRAINCTL_PLUGINS", "tests.launchers.no_such_module")
    result = cli("config", "validate", "recipe=quickstart", "hardware.launcher=toy")
    assert result.exit_code == 1
    assert "the trainctl plugin tests.launchers.no_such_module (TRAINCTL_PLUGINS) cannot be imported" in result.stderr


def test_a_launcher_from_a_plugin_validates_plans_runs_and_stops(cli, tiny_model, arith_data, monkeypatch, tmp_path):
    without = cli("config", "validate", *TOY)
    assert without.exit_code == 1 and "hardware.launcher = 'toy' is not one of" in without.stderr

    monkeypatch.setenv("TRAINCTL_PLUGINS", "tests.launchers.toy_launcher")
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
