"""An off-policy run's figures (trainctl.runtime.offpolicy_metrics): the staleness distribution of a step's samples
from verl's batch tags, and the share of the step the trainer waited for its batch."""

from __future__ import annotations

from types import SimpleNamespace

from trainctl.runtime.offpolicy_metrics import OffpolicyMetrics, staleness_figures


def _tags(*started: int, padding: int = 0) -> list[dict]:
    rows = [{"min_global_steps": s, "max_global_steps": s} for s in started]
    return rows + [{"min_global_steps": 0, "max_global_steps": 0, "is_padding": True}] * padding


def test_the_distribution_counts_each_sample_from_the_version_it_started_under():
    # step 5 trains on the weights of step 4: a sample started under version 4 is 0 behind, under 3 one, under 1 three
    got = staleness_figures(_tags(4, 4, 3, 3, 3, 1, padding=2), global_steps=5, cap=1)
    assert got == {
        "offpolicy/staleness/0": 2 / 6,
        "offpolicy/staleness/1": 3 / 6,
        "offpolicy/staleness/2": 0.0,
        "offpolicy/staleness/3": 1 / 6,
        "offpolicy/staleness_max": 3.0,
        "offpolicy/at_cap": 4 / 6,  # at the cap or past it
    }
    # up to the cap even when every sample is fresh; no cap: no at_cap
    assert staleness_figures(_tags(4, 4), 5, cap=2) == {
        "offpolicy/staleness/0": 1.0, "offpolicy/staleness/1": 0.0, "offpolicy/staleness/2": 0.0,
        "offpolicy/staleness_max": 0.0, "offpolicy/at_cap": 0.0,
    }  # fmt: skip
    assert "offpolicy/at_cap" not in staleness_figures(_tags(4), 5, cap=None)
    assert staleness_figures(_tags(padding=3), 5, cap=1) == {}


def test_the_set_reads_its_cap_from_the_launch_and_the_wait_from_verls_timing():
    batch = SimpleNamespace(tags=_tags(2, 2, 1))
    got = OffpolicyMetrics("overlap:1", busy=lambda: None).step_metrics(
        batch, 3, {"timing_s/gen": 0.25, "timing_s/step": 1.25}
    )
    assert got["offpolicy/trainer_wait"] == 0.2 and got["offpolicy/at_cap"] == 1 / 3
    uncapped = OffpolicyMetrics("split:", busy=lambda: None)
    assert uncapped.mode == "split" and uncapped.cap is None
    assert "offpolicy/trainer_wait" not in uncapped.step_metrics(batch, 3, {})


def test_the_rollouts_idle_share_is_the_time_it_sampled_nothing_between_two_steps_figures():
    """From the hf rollout servers' sampling seconds (the busiest's) and the trainer's clock between two steps'
    figures: none at the first step (nothing to compare with), then 1 - sampled / elapsed, within [0, 1]."""
    batch = SimpleNamespace(tags=[{"min_global_steps": 1}])
    busy, clock = iter([2.0, 2.5, 4.5, 4.5]), iter([10.0, 12.0, 14.0, 14.0])
    figures = OffpolicyMetrics("overlap:1", busy=lambda: next(busy), clock=lambda: next(clock))
    assert "offpolicy/rollout_idle" not in figures.step_metrics(batch, 2, {})
    assert figures.step_metrics(batch, 3, {})["offpolicy/rollout_idle"] == 0.75  # sampled 0.5 s of 2
    assert figures.step_metrics(batch, 4, {})["offpolicy/rollout_idle"] == 0.0  # 2 of 2
    assert "offpolicy/rollout_idle" not in figures.step_metrics(batch, 5, {})  # no time passed: no figure
    # a vLLM rollout's servers say nothing: no figure, ever
    assert "offpolicy/rollout_idle" not in OffpolicyMetrics("overlap:1", busy=lambda: None).step_metrics(batch, 2, {})
