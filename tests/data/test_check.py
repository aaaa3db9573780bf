"""`trainctl data check`, and the part of it `trainctl train` runs itself."""

from __future__ import annotations

from tests.data.conftest import write_jsonl, write_parquet


def _rl(source="openai/gsm8k", truth="5", prompt="What is 2 + 3?"):
    return {
        "data_source": source,
        "prompt": [{"role": "user", "content": prompt}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": truth},
        "extra_info": {"split": "train", "index": 0},
    }


def test_a_good_file_passes_with_token_counts_from_the_model(cli, tiny_model, tmp_path):
    f = write_parquet(tmp_path / "rl.parquet", [_rl(prompt=f"What is {i} + 1?") for i in range(10)])
    result = cli("data", "check", str(f), "model=tiny")
    assert result.exit_code == 0, result.output
    assert "format       rl (10 rows)" in result.stdout
    assert "openai/gsm8k: 10 rows, scored by verl" in result.stdout
    assert f"(tokenizer of {tiny_model})" in result.stdout
    assert "OK: ready to train on." in result.stdout


def test_unscored_data_source_and_empty_truths_fail(cli, tmp_path):
    f = write_parquet(tmp_path / "rl.parquet", [_rl("my/own", ""), _rl("my/own", "3"), _rl()])
    result = cli("data", "check", str(f))
    assert result.exit_code == 1
    assert "1 row: empty reward_model.ground_truth" in result.stderr
    assert "no reward function for data_source 'my/own' (2 rows)" in result.stderr
    assert "Hint: name your scorer: reward=fn reward.fn=path/to/reward.py:compute_score" in result.stderr


def test_prompts_over_the_limit_fail_when_verl_would(cli, tmp_path):
    f = write_parquet(tmp_path / "rl.parquet", [_rl(prompt="word " * 400), _rl()])
    result = cli("data", "check", str(f), "data.max_prompt_length=64")
    assert result.exit_code == 1
    assert "1 of 2 rows are longer than data.max_prompt_length = 64 tokens (estimated: no tokenizer on disk)." in (
        result.stderr
    )
    filtered = cli("data", "check", str(f), "data.max_prompt_length=64", "data.filter_overlong_prompts=true")
    assert filtered.exit_code == 0, "verl drops them itself: a warning only"
    assert "Warning: 1 of 2 rows are longer" in filtered.stderr


def test_wrong_format_names_the_missing_columns(cli, tmp_path):
    f = write_parquet(tmp_path / "sft.parquet", [{"messages": [{"role": "user", "content": "hi"}]}])
    result = cli("data", "check", str(f), "algorithm=grpo")
    assert result.exit_code == 1
    assert f"Error: {f} lacks the columns data_source, prompt, reward_model that rl training reads" in result.stderr
    assert f"Hint: convert it: trainctl data convert {f} --to rl" in result.stderr


def test_sft_rows_without_an_assistant_turn_and_duplicates(cli, tmp_path):
    good = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    bad = {"messages": [{"role": "user", "content": "only a question"}, {"role": "user", "content": "again"}]}
    f = write_parquet(tmp_path / "sft.parquet", [good, good, bad])
    result = cli("data", "check", str(f))
    assert result.exit_code == 1
    assert f"1 row: no assistant message to learn (e.g. {f}:row 3)." in result.stderr
    assert "Warning: 1 rows repeat an earlier row." in result.stderr


def test_non_parquet_input_is_told_to_convert(cli, tmp_path):
    f = write_jsonl(tmp_path / "rl.jsonl", [_rl()])
    result = cli("data", "check", str(f))
    assert result.exit_code == 1
    assert f"Error: {f}: trainers read parquet files." in result.stderr


def test_train_runs_the_cheap_checks_itself(cli, tiny_model, isolated):
    rl = isolated / "data" / "arith" / "rl"
    rl.mkdir(parents=True)
    write_parquet(rl / "train.parquet", [_rl("my/own")] * 4)
    write_parquet(rl / "test.parquet", [_rl()] * 2)
    result = cli(
        "train",
        "algorithm=grpo",
        "data.train_batch_size=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "--dry-run",
    )
    assert result.exit_code == 1
    assert "no reward function for data_source 'my/own' (4 rows)" in result.stderr
