from __future__ import annotations

import pytest

from trainctl.backends.base import flatten, key_paths
from trainctl.config.overrides import render_override, render_value


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -3,
        1e-06,
        0.28,
        1000000000,
        "vllm",
        "/abs/path/to/model",
        "~/models/x",
        "token-mean",
        "seq-mean-token-sum-norm",
        "a b",
        "it's",
        "true",
        "null",
        "1e5",
        "${data.max_response_length}",
        "",
        [1, 2],
        ["console", "wandb"],
        [],
        {},
        {"enable": True, "len": 4096},
    ],
)
def test_rendered_values_parse_back_with_hydras_grammar(value):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_override(f"k={render_value(value)}").value()
    assert parsed == value


def test_render_override_marks_additions():
    assert render_override("a.b", 1) == "a.b=1"
    assert render_override("a.b", "x", added=True) == "+a.b=x"


def test_flatten_and_key_paths():
    tree = {"a": {"b": 1, "c": {}}, "d": [1]}
    assert flatten(tree) == [("a.b", 1), ("a.c", {}), ("d", [1])]
    assert key_paths(tree) == {"a", "a.b", "a.c", "d"}
