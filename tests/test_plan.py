"""trainctl.plan: load, translate and check; the typed config; the command built once."""

from __future__ import annotations

import pytest

from trainctl.config.schema import Config, Hardware
from trainctl.errors import ConfigProblems
from trainctl.plan import check_data_file, make_plan, resolve


def test_a_plan_holds_the_typed_config_and_the_backend_config():
    plan = make_plan(["algorithm=grpo", "hardware=8gpu", "run.epochs=2"], native=False)
    assert isinstance(plan.cfg, Config) and isinstance(plan.cfg.hardware, Hardware)
    assert plan.cfg.hardware.gpus_per_node == 8 and plan.cfg.run.epochs == 2
    assert plan.backend.name == "verl-ppo"
    assert plan.value("trainer.n_gpus_per_node") == 8 and plan.value("trainer.total_epochs") == 2
    first = ["algorithm", "model", "data", "reward", "env", "distillation", "offpolicy", "tools", "hardware"]
    assert list(plan.trainctl_tree())[:9] == first


def test_the_command_is_built_once(monkeypatch):
    plan = make_plan(["recipe=quickstart"], native=False)
    calls = []
    original = type(plan.backend).command

    def counting(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(type(plan.backend), "command", counting)
    from trainctl.launch.runner import full_command

    first = full_command(plan, 1)
    second = full_command(plan, 2)
    assert len(calls) == 1
    assert first.argv == second.argv and first.env["TRAINCTL_METRICS_PATH"] != second.env["TRAINCTL_METRICS_PATH"]
    assert "TRAINCTL_METRICS_PATH" not in plan.command.env  # the plan's own command is not changed


def test_resolve_raises_every_unknown_key_make_plan_goes_on_to_the_arithmetic():
    with pytest.raises(ConfigProblems) as e:
        resolve(["algorithm=grpo", "trainer.totl_epochs=3"])
    assert [p.key for p in e.value.problems] == ["trainer.totl_epochs"]
    with pytest.raises(ConfigProblems) as e:
        make_plan(["algorithm=grpo", "hardware=2x8gpu", "data.train_batch_size=100", "trainer.totl_epochs=3"])
    assert len(e.value.problems) >= 2


def test_a_type_error_stops_before_the_arithmetic():
    with pytest.raises(ConfigProblems) as e:
        make_plan(["algorithm=grpo", "data.train_batch_size=many"], native=False)
    assert [p.key for p in e.value.problems] == ["data.train_batch_size"]


def test_checks_see_the_rows_of_the_data(tiny_model, arith_data):
    plan = make_plan(["recipe=quickstart"], native=False)
    assert plan.rows("train") == 512 and plan.rows("val") == 64


def test_check_data_file_uses_the_config_that_would_train_on_it(tiny_model, arith_data):
    report = check_data_file(arith_data / "rl" / "train.parquet", ["algorithm=grpo"])
    assert report.rows == 512 and not report.problems
