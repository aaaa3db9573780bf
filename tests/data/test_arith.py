from __future__ import annotations

import re

from trainctl.data.arith import problems, rows


def test_rows_are_deterministic_and_splits_differ():
    a = list(rows("rl", "train", 50, 0))
    assert a == list(rows("rl", "train", 50, 0))
    assert a != list(rows("rl", "test", 50, 0))


def test_rl_rows_are_graded_by_verls_gsm8k_scorer():
    from verl.utils.reward_score import default_compute_score

    for row, p in zip(rows("rl", "train", 20, 0), problems(20, 0, "train"), strict=True):
        assert row["data_source"] == "openai/gsm8k"
        assert row["reward_model"]["ground_truth"] == str(p.answer)
        assert default_compute_score(row["data_source"], p.solution(), row["reward_model"]["ground_truth"]) == 1.0
        wrong = p.solution(p.answer + 1)
        assert default_compute_score(row["data_source"], wrong, row["reward_model"]["ground_truth"]) == 0.0


def test_sft_and_dpo_rows():
    sft = next(rows("sft", "train", 1, 0))
    assert [m["role"] for m in sft["messages"]] == ["user", "assistant"]
    assert re.search(r"#### -?\d+$", sft["messages"][1]["content"])
    dpo = next(rows("dpo", "train", 1, 0))
    assert dpo["chosen"][0]["content"] != dpo["rejected"][0]["content"]
