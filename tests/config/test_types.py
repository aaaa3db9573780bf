"""The generic type checker: specs from annotations, ranges read from __post_init__, trees checked against schemas."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

import pytest

from trainctl.config.types import (
    Range,
    Spec,
    bounds,
    check_tree,
    describe,
    example,
    fits,
    post_init_ranges,
    schemas_of,
    spec_of,
)


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass
class Inner:
    lr: float = 1e-3
    steps: int = 1
    _private: int = 0


@dataclass
class Outer:
    name: str
    mode: Literal["a", "b"] = "a"
    color: Color = Color.RED
    rate: Optional[float] = None  # noqa: UP045 (the older spelling verl uses must work too)
    sizes: list[int] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    inner: Inner = field(default_factory=Inner)
    prob: float = field(default=0.5, metadata=bounds(gt=0, le=1))

    def __post_init__(self):
        assert self.inner is not None
        if self.rate is not None and self.rate < 0:
            raise ValueError("rate")
        assert self.mode in ["a", "b"], "mode"


@dataclass
class Checks:
    a: int = 1
    b: float = 0.5
    c: int = 1
    d: int = 1
    e: str = "x"

    def __post_init__(self):
        assert self.a > 0
        if not 0.0 < self.b <= 1.0:
            raise ValueError
        if self.c < 1 or self.d < 1:
            raise ValueError
        if self.a > 10:  # only with more context: `if` without raise-first is skipped
            print("big")
        assert self.e in ("x", "y")


def test_specs_of_annotations():
    assert spec_of(int) == Spec("int")
    assert spec_of(Optional[int]) == Spec("union", of=(Spec("int"), Spec("none")))  # noqa: UP045
    assert spec_of(int | None) == spec_of(Optional[int])  # noqa: UP045
    assert spec_of(Literal["a", "b"]) == Spec("literal", values=("a", "b"))
    assert spec_of(Color) == Spec("literal", values=("red", "blue"))
    assert spec_of(list[str]) == Spec("list", of=(Spec("str"),))
    assert spec_of(dict[str, Any]).kind == "dict"
    assert spec_of(Any) == Spec("any")
    assert spec_of(Inner).kind == "dataclass"


@pytest.mark.parametrize(
    ("value", "annotation", "ok"),
    [
        (1, int, True),
        (True, int, False),  # a bool is not an int here
        (1, float, True),  # an int is a fine float
        ("abc", float, False),
        ("maybe", bool, False),
        (None, Optional[float], True),  # noqa: UP045
        ("b", Literal["a", "b"], True),
        ("c", Literal["a", "b"], False),
        ([1, 2], list[int], True),
        ([1, "x"], list[int], False),
        ({"k": 1}, dict[str, Any], True),
    ],
)
def test_fits(value, annotation, ok):
    assert fits(value, spec_of(annotation)) is ok


def test_descriptions_are_words():
    assert describe(spec_of(int)) == "an integer"
    assert describe(spec_of(Optional[float])) == "a number or null"  # noqa: UP045
    assert describe(spec_of(Literal["a", "b"] | None)) == "one of: a, b or null"
    assert describe(spec_of(list[int])) == "a list of integers"


def test_ranges_read_from_post_init():
    r = post_init_ranges(Checks)
    assert r["a"] == Range(lo=0, lo_open=True)
    assert r["b"] == Range(lo=0.0, lo_open=True, hi=1.0)
    assert r["c"] == Range(lo=1) and r["d"] == Range(lo=1)
    assert r["e"] == Range(choices=("x", "y"))
    assert set(r) == {"a", "b", "c", "d", "e"}  # `if self.a > 10: print(...)` says nothing


def test_choices_written_as_a_set_keep_the_written_order():
    """A set's iteration order changes with the hash seed: the schemas trainctl ships must not."""

    @dataclass
    class Action:
        action: str = "zeta"

        def __post_init__(self):
            assert self.action in {"zeta", "alpha", "mid", "beta"}

    assert post_init_ranges(Action)["action"] == Range(choices=("zeta", "alpha", "mid", "beta"))


def test_a_guarded_range_holds_when_the_value_is_set():
    r = post_init_ranges(Outer)
    assert r["rate"] == Range(lo=0)
    assert r["mode"] == Range(choices=("a", "b"))


def test_range_words_and_admission():
    assert Range(lo=0, lo_open=True, hi=1).text() == "in (0, 1]"
    assert Range(lo=1).text() == "at least 1"
    assert Range(lo=0, lo_open=True, hi=1).admits(1) and not Range(lo=0, lo_open=True, hi=1).admits(0)


def test_check_tree_reports_each_kind_with_its_path():
    schemas = schemas_of(Outer)
    root = schemas[f"{Outer.__module__}.{Outer.__qualname__}"]
    tree = {
        "mode": "c",
        "rate": -1,
        "prob": 1.5,
        "sizes": [1, "x"],
        "extra": {"anything": {"goes": 1}},
        "inner": {"lr": "abc", "stepz": 3},
    }
    issues = {i.path: i for i in check_tree(tree, root, schemas, required=True)}
    assert issues["mode"].kind == "type" and issues["mode"].expected == "one of: a, b"
    assert issues["rate"].kind == "range" and issues["rate"].expected == "at least 0"
    assert issues["prob"].kind == "range" and issues["prob"].expected == "in (0, 1]"
    assert issues["sizes"].kind == "type"
    assert issues["inner.lr"].kind == "type" and issues["inner.lr"].expected == "a number"
    assert issues["inner.stepz"].kind == "unknown" and "steps" in issues["inner.stepz"].known
    assert issues["name"].kind == "missing"
    assert "extra.anything" not in issues and "color" not in issues


def test_report_filters_what_is_reported():
    schemas = schemas_of(Outer)
    root = schemas[f"{Outer.__module__}.{Outer.__qualname__}"]
    issues = check_tree({"name": 3, "mode": "zzz"}, root, schemas, report=lambda p: p == "mode")
    assert [i.path for i in issues] == ["mode"]


def test_examples_are_valid_values():
    schemas = schemas_of(Outer)
    fields = schemas[f"{Outer.__module__}.{Outer.__qualname__}"].fields
    for name in ("mode", "prob", "rate"):
        info = fields[name]
        value = example(info)
        assert fits(value, info.spec) and (info.range is None or info.range.admits(value)), name


def test_schemas_round_trip_through_json():
    from trainctl.config.types import ClassSchema

    for schema in schemas_of(Outer).values():
        assert ClassSchema.from_json(schema.to_json()) == schema
