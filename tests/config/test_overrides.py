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


# values a command line writes, and strings near the edges of Hydra's token rules (a float's exponent, inf and nan,
# true/null in any case, digits before letters, underscores between digits)
PLAIN_VALUES = [
    "grpo", "qwen2.5-7b", "8gpu", "2x8gpu", "1", "-1", "+3", "0", "007", "1_000", "1__0", "1e-6", "1e-06", "1E5",
    "1.", ".5", "1.5.2", "1e", "e1", "1e+", "3.0e-4_1", "inf", "-inf", "+Inf", "nan", "NaN", "infinity", "inf_x",
    "true", "TRUE", "False", "tru", "truex", "null", "NULL", "nul", "none", "/tmp/x.parquet", "./data", "a:b",
    "gpt-4.1-mini", "user@host", "-", ".", ":", "+", "_", "-x", "a-", "1-2", "0x10", "1_", "_1", "4bit", "fp16"
]  # fmt: skip


def test_plain_overrides_read_as_hydra_reads_them():
    """The overrides read without Hydra's parser come out exactly as Hydra's parser reads them: the same key, op
    and value, of the same type."""
    import random

    from trainctl.config.overrides import _override, _plain, parse_one

    rng = random.Random(54)
    values = PLAIN_VALUES + [
        "".join(rng.choice("aeEfilnrstu019_-.+/:@") for _ in range(rng.randint(1, 6))) for _ in range(3000)
    ]
    keys = ["algorithm", "a.b_c-d", "actor_rollout_ref.actor.optim.lr", "_x.y"]
    read = 0
    for i, value in enumerate(values):
        raw = f"{('', '+', '++')[i % 3]}{keys[i % len(keys)]}={value}"
        plain = _plain(raw)
        if plain is None:
            continue
        read += 1
        o = parse_one(raw)
        hydra = _override(o, raw, o.value())
        assert (plain.key, plain.op, plain.package) == (hydra.key, hydra.op, hydra.package), raw
        assert type(plain.value) is type(hydra.value) and repr(plain.value) == repr(hydra.value), raw
    assert read > 2500
    assert all(_plain(f"x={v}") is not None for v in PLAIN_VALUES)
    for other in ["x=a,b", "x=[1,2]", "x='a b'", "~x", "x=", "x=${y}", "x=a b", "a/b=c", "x@p=1", "x.0=1", "x=a=b"]:
        assert _plain(other) is None, other
