from __future__ import annotations

import re

import pytest

from trainctl.data.arith import SPACE, SPLITS, problems, room, rows


def test_rows_are_deterministic_and_splits_differ():
    a = list(rows("rl", "train", 50, 0))
    assert a == list(rows("rl", "train", 50, 0))
    assert a != list(rows("rl", "test", 50, 0))


def test_the_splits_share_no_problem_and_the_last_holds_what_is_left():
    seen = {s: {(p.a, p.op, p.b) for p in problems(512, 0, s)} for s in SPLITS}
    assert all(len(v) == 512 for v in seen.values())
    assert not seen["train"] & seen["test"] and not seen["warmup"] & (seen["train"] | seen["test"])
    assert room("warmup") == SPACE - 2 * room("train") == 4169
    assert len({(p.a, p.op, p.b) for p in problems(room("warmup"), 0, "warmup")}) == 4169
    with pytest.raises(ValueError, match="room for 4169 problems in split 'warmup', not 4170"):
        next(problems(4170, 0, "warmup"))


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
