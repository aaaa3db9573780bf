"""The summary eval writes: over every sample, and per data_source when a file mixes them."""

from __future__ import annotations

import pytest

from trainctl.eval.core import mark_best, summarize, write_metrics
from trainctl.eval.passk import pass_at_k
from trainctl.eval.settings import Sampling
from trainctl.metrics import read_jsonl


def _record(row, source, acc, reward, tokens=10, truncated=False):
    return {"row": row, "data_source": source, "acc": acc, "reward": reward, "response_tokens": tokens,
            "truncated": truncated}  # fmt: skip


def test_a_mixed_file_gets_metrics_per_data_source_and_pass_at_k_per_prompt():
    records = [
        _record(0, "openai/gsm8k", 1.0, 1.0), _record(0, "openai/gsm8k", 0.0, 0.0, truncated=True),
        _record(1, "openai/gsm8k", 0.0, 0.0), _record(1, "openai/gsm8k", 0.0, 0.0),
        _record(2, "math", 1.0, 1.0, tokens=20), _record(2, "math", 1.0, 1.0, tokens=30),
    ]  # fmt: skip
    m = summarize("eval/mix", records, Sampling(n=2, temperature=1.0, ks=[1, 2]))
    assert m["eval/mix/acc"] == pytest.approx(3 / 6)
    assert m["eval/mix/truncated"] == pytest.approx(1 / 6)
    assert m["eval/mix/response_length"] == pytest.approx(90 / 6)
    assert m["eval/mix/pass@1"] == pytest.approx((0.5 + 0 + 1) / 3)
    assert m["eval/mix/pass@2"] == pytest.approx((1 + 0 + 1) / 3)
    assert m["eval/mix/openai/gsm8k/acc"] == pytest.approx(1 / 4)
    assert m["eval/mix/openai/gsm8k/pass@2"] == pytest.approx(pass_at_k(2, 1, 2) / 2)
    assert m["eval/mix/math/acc"] == 1.0 and m["eval/mix/math/response_length"] == 25


def test_one_source_and_one_sample_give_no_per_source_or_pass_at_k_keys():
    m = summarize("eval/a", [_record(0, "s", 1.0, 0.5), _record(1, "s", 0.0, 0.25)], Sampling(n=1))
    assert sorted(m) == ["eval/a/acc", "eval/a/response_length", "eval/a/reward", "eval/a/truncated"]


def test_metrics_of_each_step_merge_into_one_file(tmp_path):
    write_metrics(tmp_path, 2, {"eval/a/acc": 0.5})
    write_metrics(tmp_path, 1, {"eval/a/acc": 0.25})
    write_metrics(tmp_path, 2, {"eval/b/acc": 1.0})
    expected = {1: {"eval/a/acc": 0.25}, 2: {"eval/a/acc": 0.5, "eval/b/acc": 1.0}}
    assert read_jsonl(tmp_path / "metrics.jsonl") == expected
    assert not list(tmp_path.glob(".*tmp*")), "written atomically, no leftovers"


def test_the_best_is_chosen_as_ckpt_best_chooses_and_the_base_model_takes_no_part(tmp_path):
    from trainctl.eval.core import Result
    from trainctl.eval.targets import Target

    class Ckpt:  # a checkpoint stand-in: mark_best only asks whether a row is one
        pass

    def result(label, step, value, ckpt=True):
        return Result(Target(label, step, Ckpt() if ckpt else None), {"eval/a/acc": value}, tmp_path, 1.0, 1, 1)

    rows = [result("base", 0, 0.9, ckpt=False), result("step 1", 1, 0.5), result("step 2", 2, 0.5)]
    best = mark_best(rows, "eval/a/acc")
    assert best is rows[1] and [r.best for r in rows] == [False, True, False]  # ties: the earliest, as max() does
