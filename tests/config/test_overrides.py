from __future__ import annotations

import pytest

from trainctl.config.overrides import expand, parse
from trainctl.errors import UsageError


def test_sweep_expands_to_the_product_in_order():
    points = expand(["algorithm=grpo,dapo", "model=qwen2.5-7b,qwen3-8b", "run.epochs=1"], multirun=True)
    assert [[o.raw for o in p] for p in points] == [
        ["algorithm=grpo", "model=qwen2.5-7b", "run.epochs=1"],
        ["algorithm=grpo", "model=qwen3-8b", "run.epochs=1"],
        ["algorithm=dapo", "model=qwen2.5-7b", "run.epochs=1"],
        ["algorithm=dapo", "model=qwen3-8b", "run.epochs=1"],
    ]


def test_range_sweep_and_add_prefix_survive_expansion():
    points = expand(["+data.foo=range(1,3)"], multirun=True)
    assert [[(o.raw, o.key, o.value, o.op) for o in p] for p in points] == [
        [("+data.foo=1", "data.foo", 1, "add")],
        [("+data.foo=2", "data.foo", 2, "add")],
    ]


def test_sweep_without_multirun_is_a_usage_error():
    with pytest.raises(UsageError, match="gives 2 values"):
        expand(["algorithm=grpo,dapo"], multirun=False)


def test_parsed_values_are_typed():
    ov = {o.key: o for o in parse(["a.b=1e-6", "c=[1,2]", "+d='x y'", "~e", "f=null"])}
    assert ov["a.b"].value == 1e-6
    assert ov["c"].value == [1, 2]
    assert ov["d"].op == "add" and ov["d"].value == "x y"
    assert ov["e"].op == "delete"
    assert ov["f"].value is None


def test_a_malformed_override_never_shows_a_value_assigned_inside_it(cli):
    """An env list written with values (NAME=secret) is malformed for Hydra; the message names it without them."""
    result = cli("config", "validate", "tools=calculator", "tools.servers.calculator.env=[MY_TOKEN=abc123secret]")
    assert result.exit_code == 2, result.output
    assert "abc123secret" not in result.output
    assert "malformed override 'tools.servers.calculator.env=[MY_TOKEN=***]'" in result.stderr
