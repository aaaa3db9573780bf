"""trainctl.metrics: a run's metrics read from its records (verl's file logger, ART's history), merged over attempts,
and the end-of-run summary of its key metrics."""

from __future__ import annotations

import json
from pathlib import Path

from trainctl.metrics import grouped_names, read_jsonl, read_metrics, run_summary, series, sparkline, unknown_metric
from trainctl.runs.keys import key_metrics


def _write(path: Path, records: list, tail: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)


def test_both_record_shapes_are_read_and_a_half_written_line_is_skipped(tmp_path):
    verl_style = tmp_path / "a.jsonl"
    _write(verl_style, [{"step": 1, "data": {"train/loss": 2.0}}, {"step": 1, "data": {"val/loss": 3.0}}], '{"step": 2')
    assert read_jsonl(verl_style) == {1: {"train/loss": 2.0, "val/loss": 3.0}}
    art_style = tmp_path / "history.jsonl"
    _write(art_style, [{"step": 0, "recorded_at": "t", "reward": 0.5}, {"step": 1, "metrics": {"reward": 0.7}}, {}])
    assert read_jsonl(art_style) == {0: {"reward": 0.5}, 1: {"reward": 0.7}}


def test_attempts_merge_in_order_and_a_resumed_attempts_steps_win(tmp_path):
    metrics = tmp_path / "metrics"
    _write(metrics / "attempt-1.jsonl", [{"step": s, "data": {"train/loss": 10.0 - s}} for s in (1, 2, 3)])
    _write(metrics / "attempt-10.jsonl", [{"step": 4, "data": {"train/loss": 0.5}}])
    _write(metrics / "attempt-2.jsonl", [{"step": 3, "data": {"train/loss": 6.5}}, {"step": 5, "data": {"x": "y"}}])
    got = read_metrics(tmp_path)
    assert list(got) == [1, 2, 3, 4, 5]
    assert series(got, "train/loss") == [(1, 9.0), (2, 8.0), (3, 6.5), (4, 0.5)]  # attempt 10 after attempt 2
    assert series(got, "x") == []  # not a number
    assert read_metrics(tmp_path / "no-run") == {}


def test_an_unknown_metric_gets_a_guess_every_logged_name_and_a_runnable_fix():
    logged = ["actor/entropy", "actor/pg_loss", "critic/score/mean", "train/loss"]
    assert unknown_metric("train/loss", logged, "run a", "x -m {}") is None
    error = unknown_metric("actor/pg_los", logged, "run a", "trainctl runs plot runs/a -m {}")
    assert error.message == "run a never logged the metric 'actor/pg_los'."
    assert error.details[:2] == ["Did you mean 'actor/pg_loss'?", "Metrics logged (4):"]
    assert "actor/{entropy,pg_loss}" in error.details[2]
    assert error.hint == "trainctl runs plot runs/a -m actor/pg_loss"
    empty = unknown_metric("train/loss", [], "run b", "x -m {}")
    assert "has no metrics logged" in empty.message


def test_grouped_names_fold_siblings():
    names = ["loss", "actor/a", "actor/b", "critic/score/mean"]
    assert grouped_names(names) == ["actor/{a,b}", "critic/score/mean", "loss"]


def test_sparkline_spans_the_range_and_fits_its_width():
    assert sparkline([]) == ""
    assert sparkline([0.0, 1.0]) == "▁█"
    assert sparkline([1.0, 1.0, 1.0]) == "▁▁▁"
    assert len(sparkline([float(i) for i in range(500)], width=40)) == 40


def test_the_run_summary_shows_the_families_key_metrics_from_first_to_last(tmp_path):
    records = [
        {"step": s, "data": {"critic/score/mean": s / 4, "actor/kl_loss": 0.1, "train/other": 1}} for s in (1, 2, 3)
    ]
    _write(tmp_path / "metrics" / "attempt-1.jsonl", records)
    lines = run_summary(tmp_path, key_metrics("ppo"))
    assert lines == [
        "critic/score/mean over 3 steps: 0.25 -> 0.75 (min 0.25, max 0.75)",
        "  ▁▄█",
        "actor/kl_loss over 3 steps: 0.1 -> 0.1 (min 0.1, max 0.1)",
        "  ▁▁▁",
    ]


def test_without_its_key_metrics_the_summary_falls_back_to_a_loss_and_a_single_step_is_one_line(tmp_path):
    _write(tmp_path / "metrics" / "attempt-1.jsonl", [{"step": 7, "data": {"actor/pg_loss": 0.25}}])
    assert run_summary(tmp_path, key_metrics("sft")) == ["actor/pg_loss at step 7: 0.25"]
    assert run_summary(tmp_path / "nothing", key_metrics(None)) == []
