"""offpolicy=overlap (issue 56) for real: the tiny GRPO recipe on verl's colocate_async trainer with trainctl's CPU
rollout, 3 steps. verl's staleness figures are logged at every step and stay within the cap; the correction's
figures are there. Slow (40-70 s here): the default suite has no time left for it."""

from __future__ import annotations

import pytest

from tests.real_runs import train

STEPS = 3
CAP = 1  # conf/offpolicy/overlap.yaml's max_staleness
STALENESS = [
    f"training/off_policy/trajectory_{what}/{stat}"
    for what in ("staleness", "staleness_worst", "spans")
    for stat in ("mean", "max", "min")
]


@pytest.mark.slow
def test_overlap_logs_staleness_within_its_cap_at_every_step(real_home):
    from trainctl.metrics import read_metrics

    run = train(
        real_home, "grpo-overlap", "recipe=grpo-arith-tiny-cpu", "offpolicy=overlap", f"run.max_steps={STEPS}",
        "logger=console",
    )  # fmt: skip
    saved = (run.path / "trainctl.yaml").read_text()
    assert "mode: overlap" in saved
    metrics = read_metrics(run.path)
    assert sorted(metrics) == list(range(1, STEPS + 1))
    for step, row in metrics.items():
        missing = [k for k in STALENESS if k not in row]
        assert not missing, (step, missing)
        assert 0 <= row["training/off_policy/trajectory_staleness_worst/max"] <= CAP, (step, row)
        # the correction (tis) is on: its weights are computed against the rollout's log-probs
        assert "rollout_corr/rollout_is_mean" in row and row["rollout_corr/rollout_is_max"] <= 2.0 + 1e-6, step
    # the first step trains on the batch submitted with it; the prefetched one is a step behind after that
    assert metrics[1]["training/off_policy/trajectory_staleness_worst/max"] == 0
    assert metrics[STEPS]["training/off_policy/trajectory_staleness/max"] == 1
