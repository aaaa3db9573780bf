"""The registry of reward kinds: trainctl's own registered by importing their modules, a lookup that says which name
was meant, and registrations that could never work refused at import."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest

from trainctl.backends.rewards import RewardKind, kinds, lookup, register, registry
from trainctl.config.schema import opt
from trainctl.errors import ConfigProblems


@dataclass
class Inner:
    x: int = 1


@dataclass
class Nested:
    inner: Inner = dataclasses.field(default_factory=Inner)


@pytest.fixture(autouse=True)
def own_registry(monkeypatch):
    """Registrations made here do not outlive the test."""
    registry.names()
    monkeypatch.setattr(registry, "KINDS", dict(registry.KINDS))


def test_trainctls_kinds_are_registered_by_their_modules():
    found = {k.name: k for k in kinds()}
    assert list(found)[:4] == ["rule", "fn", "model", "judge"]
    for name, kind in found.items():
        assert type(kind).__module__ == f"trainctl.backends.rewards.{name}"
        assert lookup(name) is kind and kind.summary
    assert found["rule"].verl_default and not found["judge"].verl_default
    assert {n for n, k in found.items() if k.scores_every_row} == {"fn", "model", "judge"}
    assert {n for n, k in found.items() if not k.needs_ground_truth} == {"model", "judge"}


def test_an_unknown_kind_says_which_was_meant():
    with pytest.raises(ConfigProblems) as e:
        lookup("jugde")
    (p,) = e.value.problems
    assert p.message == "unknown reward kind 'jugde'."
    assert p.key == "reward.kind"
    assert p.details == ["Did you mean 'judge'?"]
    assert p.hint.startswith("reward.kind is one of rule, fn, model, judge (")
    with pytest.raises(ConfigProblems) as e:
        lookup("zzz")
    assert e.value.problems[0].details == []


def test_a_kind_registered_here_is_found_and_lists_its_settings():
    @dataclass
    class CutoffSettings:
        cutoff: float = opt("scores below it count as 0", 0.5, ge=0)

    @register("threshold")
    class Threshold(RewardKind):
        summary = "a test kind"
        Settings = CutoffSettings

    assert lookup("threshold").name == "threshold"
    assert ("reward.cutoff", "a number, at least 0", "threshold: scores below it count as 0") in (
        registry.setting_keys()
    )
    assert [k.name for k in registry.readers("cutoff")] == ["threshold"]


def test_registrations_that_could_never_work_are_refused():
    with pytest.raises(TypeError, match="not a subclass of RewardKind"):
        register("odd")(object)

    @dataclass
    class Taken:
        num_workers: int = 1  # verl's reward.num_workers: the command line could never set it

    with pytest.raises(ValueError, match="a setting may not be named 'num_workers'"):
        register("taken")(type("Taken", (RewardKind,), {"Settings": Taken}))

    with pytest.raises(TypeError, match=r"reward\.inner is a section"):
        register("nested")(type("Nested", (RewardKind,), {"Settings": Nested}))
    with pytest.raises(ValueError, match="registered twice"):
        register("judge")(type("Other", (RewardKind,), {}))
