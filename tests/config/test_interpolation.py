"""Interpolations read without OmegaConf's parser give what OmegaConf gives, or are left to it."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from trainctl.config import resolvers
from trainctl.config.interpolation import resolve

ROOT = {
    "run": {"x": 3, "none": None, "name": "n", "dir": "/a/b", "flag": True, "inner": "${run.name}", "gone": "???"},
    "paths": {"home": "${oc.env:TC_TEST_HOME,${oc.env:HOME}/.tc}", "models": "${paths.home}/models"},
    "logger": {"destinations": {"wandb": {"env": ["WANDB_KEY"]}, "mlflow": None}},
    "lst": ["${run.name}", 2, "${run.x}", {"k": "${run.inner}"}],
    "nested": {"m": "???", "d": {"e": "${run.dir}"}},
}


def _omegaconf(tree: dict, root: dict) -> dict:
    resolvers.register()
    cfg = OmegaConf.create({**root, "__t__": tree})
    return OmegaConf.to_container(cfg["__t__"], resolve=True)


@pytest.mark.parametrize(
    "value",
    [
        "${run.x}",
        "${run.none}",
        "${run.flag}",
        "${run.inner}",  # a value that is itself an interpolation
        "${lst}",
        "${nested}",  # a missing value inside stays ???
        "${nested.d}",
        "${paths.models}",
        "${oc.env:TC_TEST_UNSET,fallback}",
        "${oc.env:TC_TEST_UNSET,null}",
        "${oc.env:TC_TEST_SET}",
        "x-${run.name}/${run.dir}",
        "${tc.or:${run.none},1000000000}",
        "${tc.or:${run.none},-1}",
        "${tc.if_null:${run.none},\"no\",'steps'}",
        "${tc.if_eq:${run.name},n,false}",
        "${tc.if_eq:${run.name},n,4bit}",
        "${tc.if_eq:${run.name},n,a.b/c-d}",
        "${tc.if_eq:${run.name},n,TRUE}",
        "${tc.if_eq:${run.name},n,Null}",
        '${tc.ne:${tc.if_null:${run.none},"no","steps"},"no"}',
        "${tc.abspath:${run.dir}}/checkpoints",
        "${tc.logger_backends:${logger.destinations}}",
        "${tc.logger_env:${logger.destinations}}",
        "${tc.sum:${run.x},${run.x}}",
        "${tc.python:}",
    ],
)
def test_what_is_read_is_what_omegaconf_reads(value, monkeypatch):
    monkeypatch.setenv("TC_TEST_SET", "set")
    monkeypatch.delenv("TC_TEST_UNSET", raising=False)
    monkeypatch.delenv("TC_TEST_HOME", raising=False)
    tree = {"k": value, "l": [value, "plain", "???"]}
    plain = resolve(tree, ROOT)
    assert plain is not None, value
    expected = _omegaconf(tree, ROOT)
    assert plain == expected
    assert repr(plain) == repr(expected)  # the same types too (1 == 1.0 == True)


@pytest.mark.parametrize(
    "value",
    [
        "${tc.or:${run.none},1e3}",  # a float written as an argument
        "${tc.or:${run.none}, 2}",  # whitespace
        "${tc.or:${run.none},007}",  # digits OmegaConf reads as three INT tokens, then a string
        "${tc.or:${run.none},}",  # an empty argument
        '${tc.or:${run.none},"a"${run.name}}',
        "${.x}",  # a relative key
        "${run.missing}",
        "${run.gone}",  # a missing value (???)
        "${oc.select:run.x}",  # a resolver it does not know
        "${tc.sum:${run.x},${run.name}}",  # a resolver that raises
        "a\\${run.x}",  # an escape
        "${run.x}-${run.x}",  # a number inside a string
        "${run.name",
        "${lst.0}",
        "{${run.name}}",
    ],
)
def test_what_is_left_to_omegaconf(value):
    assert resolve({"k": value}, ROOT) is None


def test_a_cycle_and_data_omegaconf_gives_back_changed_are_left_to_it():
    assert resolve({"k": "${a}"}, {"a": "${b}", "b": "${a}"}) is None
    assert resolve({"k": "${run.name}"}, {**ROOT, "t": (1, 2)}) is None  # a tuple comes back a list
    assert resolve({"k": "x"}, {1: "int key"}) is None


CONFIGS = [
    *([f"recipe={r}"] for r in sorted(p.stem for p in (Path(__file__).parents[2] / "conf" / "recipe").glob("*.yaml"))),
    ["algorithm=grpo", "logger=[wandb,mlflow]", "run.name=x", "run.dir=/tmp/x"],
    ["algorithm=dpo", "hardware=cpu", "lora=r8", "data.name=other"],
]


@pytest.mark.parametrize("args", CONFIGS, ids=lambda a: " ".join(a))
def test_trainctl_sections_read_without_omegaconf_are_what_omegaconf_reads(args, isolated):
    from trainctl.config.compose import compose
    from trainctl.config.overrides import parse
    from trainctl.config.schema import BACKEND_NODES
    from trainctl.config.search import SearchPath

    search = SearchPath.default()
    comp = compose(parse(args, search), search)
    sections = [str(s) for s in comp.cfg if s not in BACKEND_NODES]
    raw = OmegaConf.to_container(comp.cfg, resolve=False)
    plain = resolve({s: raw[s] for s in sections}, raw)
    assert plain is not None, "the shipped groups are read without OmegaConf"
    expected = {s: OmegaConf.to_container(comp.cfg[s], resolve=True) for s in sections}
    assert plain == expected
    assert repr(plain) == repr(expected)
