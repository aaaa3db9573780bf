"""trainctl.launch.rundir: the run folder written before anything starts, and its attempts."""

from __future__ import annotations

import json

from trainctl.launch.rundir import RunDir
from trainctl.launch.runner import full_command
from trainctl.plan import make_plan


def test_config_command_and_attempts(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "wandb-secret-value-123")
    plan = make_plan(["recipe=quickstart", f"run.dir={tmp_path}/r"], native=False)
    run = RunDir(plan.run_dir)
    run.write_config(plan, ["recipe=quickstart", "run.name=wandb-secret-value-123"])
    command = full_command(plan, 1)
    run.write_command(plan, command, ["recipe=quickstart"])
    attempt = run.start_attempt(command.launcher)
    run.finish_attempt("finished", 0, seconds=1.5)

    status = json.loads((plan.run_dir / "run.json").read_text())
    assert status["state"] == "finished" and status["family"] == "sft" and status["backend"] == "verl-sft"
    assert status["attempts"][0]["exit_code"] == 0 and attempt["log"] == "logs/attempt-1.log"
    for name in ("trainctl.yaml", "verl_sft.yaml", "command.sh", "lock.json", "run.json"):
        text = (plan.run_dir / name).read_text()
        assert "wandb-secret-value-123" not in text, name
    assert "exec " in (plan.run_dir / "command.sh").read_text()
