"""The backend's own validation: its verdicts are cached per config, whatever the run is named."""

from __future__ import annotations

import pytest

from trainctl.checks.native import _container, _fingerprint
from trainctl.plan import resolve


@pytest.mark.parametrize(
    "args",
    [
        ["recipe=agent-arith-tiny-cpu"],  # the PPO family; its tool config lives in the run folder
        ["recipe=quickstart"],
        ["recipe=dpo-arith-tiny-cpu"],
    ],
)
def test_a_verdict_holds_for_another_run_of_the_same_config_but_not_for_another_config(args, isolated):
    def key(*more: str) -> str:
        subject = resolve([*args, *more]).subject
        return _fingerprint(subject, _container(subject))

    one = key("run.name=one")
    assert key("run.name=two") == one
    assert key("run.name=one", "run.dir=elsewhere/one") == one
    assert key("run.name=one", "run.seed=7") != one
