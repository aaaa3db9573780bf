"""`trainctl eval` for real: the tiny model generates on the CPU, verl's reward manager scores, files are written."""

from __future__ import annotations

import importlib.util
import json
import re
from itertools import combinations
from pathlib import Path

import pytest

from tests.eval.conftest import REWARD, REWARD_ARGS
from tests.real_runs import GRPO_EVERY, GRPO_STEPS, validation_dir
from trainctl.eval.passk import pass_at_k
from trainctl.metrics import read_jsonl, read_metrics


def _reward_fn():
    spec = importlib.util.spec_from_file_location("text_reward", REWARD)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.compute_score


def _samples(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_eval_of_a_model_prints_the_table_and_writes_rewards_one_can_recompute(cli, tiny_model, arith_data, tmp_path):
    out = tmp_path / "out"
    result = cli("eval", "tiny", *REWARD_ARGS, "--limit", "12", "--out", str(out))
    assert result.exit_code == 0, result.output[-3000:]
    header = next(line for line in result.stdout.splitlines() if line.startswith("model"))
    assert header.split()[:6] == ["model", "prompts", "acc", "reward", "format", "resp"], result.stdout
    row = next(line for line in result.stdout.splitlines() if line.startswith("tiny"))
    assert row.split()[1] == "12"

    samples = _samples(out / "samples" / "arith" / "tiny.jsonl")
    assert len(samples) == 12
    score = _reward_fn()
    import pyarrow.parquet as pq

    rows = pq.read_table(arith_data / "rl" / "test.parquet").to_pylist()
    for s in samples:
        assert s["prompt"] == rows[s["row"]]["prompt"]
        assert s["ground_truth"] == rows[s["row"]]["reward_model"]["ground_truth"]
        expected = score("openai/gsm8k", s["response"], s["ground_truth"])
        assert s["reward"] == pytest.approx(expected["score"]), s
        assert s["acc"] == float(expected["acc"])
    rewards = {s["reward"] for s in samples}
    assert len(rewards) > 1, "the rewards vary across prompts (else the check above proves little)"
    metrics = read_jsonl(out / "metrics.jsonl")[0]
    assert metrics["eval/arith/reward"] == pytest.approx(sum(s["reward"] for s in samples) / 12)
    assert metrics["eval/arith/acc"] == pytest.approx(sum(s["acc"] for s in samples) / 12)
    assert metrics["eval/arith/response_length"] == pytest.approx(sum(s["response_tokens"] for s in samples) / 12)
    assert metrics["eval/arith/truncated"] == pytest.approx(sum(s["truncated"] for s in samples) / 12)
    # arith's answer_format: the share of responses with a `#### N` line, right or wrong
    assert all(s["format"] == bool(re.search(r"#### -?[0-9]", s["response"])) for s in samples)
    assert metrics["eval/arith/format"] == pytest.approx(sum(s["format"] for s in samples) / 12)
    assert f"{metrics['eval/arith/acc']:.4f}" in row


def test_eval_with_the_rule_reward_scores_with_verls_gsm8k_scorer(cli, tiny_model, arith_data, tmp_path):
    from verl.utils.reward_score import default_compute_score

    out = tmp_path / "out"
    result = cli("eval", "tiny", "--limit", "4", "--out", str(out), "max_tokens=8")
    assert result.exit_code == 0, result.output[-3000:]
    samples = _samples(out / "samples" / "arith" / "tiny.jsonl")
    assert [s["response_tokens"] <= 8 for s in samples] == [True] * 4
    for s in samples:
        assert s["reward"] == default_compute_score("openai/gsm8k", s["response"], s["ground_truth"])


def test_greedy_eval_of_each_checkpoint_agrees_with_verls_validation_and_ckpt_best_picks_the_best(
    cli, grpo_run, tiny_model, arith_data, tmp_path
):
    """verl validates with val_kwargs (temperature 0: greedy, n=1) through the same rollout and reward manager;
    eval's defaults are those settings, so each step's score must be the one verl logged, sample for sample."""
    import shutil

    validation = validation_dir(grpo_run)
    # eval writes into the run folder: a copy, since the session's run is shared
    grpo_run = shutil.copytree(grpo_run.path, tmp_path / "grpo")
    result = cli("eval", str(grpo_run), "--each-checkpoint")
    assert result.exit_code == 0, result.output[-3000:]
    lines = result.stdout.splitlines()
    rows = [line for line in lines if line.startswith(("base", "step"))]
    saved = [GRPO_EVERY, GRPO_STEPS]
    assert [r.split()[0] + (r.split()[1] if r.startswith("step") else "") for r in rows] == [
        "base", *(f"step{s}" for s in saved)
    ]  # fmt: skip
    assert sum("<- best" in r for r in rows) == 1 and "<- best" not in rows[0]

    logged = read_metrics(grpo_run)
    scores = read_jsonl(grpo_run / "eval" / "metrics.jsonl")
    assert sorted(scores) == [0, *saved]
    for step in (0, *saved):
        assert scores[step]["eval/arith/acc"] == pytest.approx(logged[step]["val-core/openai/gsm8k/acc/mean@1"])
        assert scores[step]["eval/arith/reward"] == pytest.approx(logged[step]["val-aux/openai/gsm8k/reward/mean@1"])
        # and response for response: verl's dump holds each prompt's chat text and the response it scored
        dumped = {r["input"]: r for r in map(json.loads, (validation / f"{step}.jsonl").read_text().splitlines())}
        name = "base" if step == 0 else f"step-{step}"
        ours = _samples(grpo_run / "eval" / "samples" / "arith" / f"{name}.jsonl")
        assert len(ours) == len(dumped) == 64
        for s in ours:
            (theirs,) = [r for text, r in dumped.items() if s["prompt"][0]["content"] in text]
            assert (s["response"], s["reward"]) == (theirs["output"], pytest.approx(theirs["score"]))

    best_row = next(r for r in rows if "<- best" in r)
    best_step = int(best_row.split()[1])
    picked = cli("ckpt", "best", str(grpo_run), "--metric", "eval/arith/acc")
    assert picked.exit_code == 0, picked.output
    assert f"global_step_{best_step}" in picked.stdout
    listed = cli("ckpt", "ls", str(grpo_run), "-m", "eval/arith/acc")
    assert listed.exit_code == 0 and listed.stdout.count("eval/arith/acc=") == 2, listed.stdout


def test_sampled_eval_reports_unbiased_pass_at_k(cli, grpo_run, tiny_model, arith_data, tmp_path):
    out = tmp_path / "out"
    ckpt = grpo_run.path / "checkpoints" / f"global_step_{GRPO_STEPS}"
    result = cli("eval", str(ckpt), "n=4", "temperature=1.0", "seed=3", "--limit", "16", "--out", str(out))
    assert result.exit_code == 0, result.output[-3000:]
    assert "pass@4" in result.stdout and "pass@2" in result.stdout
    samples = _samples(out / "samples" / "arith" / f"step-{GRPO_STEPS}.jsonl")
    assert len(samples) == 64
    metrics = read_jsonl(out / "metrics.jsonl")[GRPO_STEPS]
    by_row: dict[int, list[bool]] = {}
    for s in samples:
        by_row.setdefault(s["row"], []).append(s["acc"] >= 1.0)
    for k in (1, 2, 4):
        expected = sum(pass_at_k(4, sum(v), k) for v in by_row.values()) / len(by_row)
        assert metrics[f"eval/arith/pass@{k}"] == pytest.approx(expected)
    assert metrics["eval/arith/pass@1"] == pytest.approx(metrics["eval/arith/acc"])  # acc is 0/1 here
    assert len({s["response"] for s in samples}) > 4, "sampling draws different responses"


@pytest.mark.parametrize(("n", "c", "k"), [(5, 0, 1), (5, 1, 1), (5, 2, 3), (10, 3, 5), (4, 4, 2), (6, 1, 6)])
def test_pass_at_k_is_the_chance_that_some_of_k_drawn_samples_is_correct(n, c, k):
    """The unbiased estimator against counting every k-subset of n samples of which c are correct."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(combinations(range(n), k))
    brute = sum(any(samples[i] for i in s) for s in subsets) / len(subsets)
    assert pass_at_k(n, c, k) == pytest.approx(brute)
