"""What `trainctl eval` refuses before loading any model: each one clear message with a fix, and exit code 1 (2 for
a malformed command line)."""

from __future__ import annotations

import sys

import pytest


@pytest.fixture(autouse=True)
def nothing_loaded(monkeypatch):
    """Every check here runs before a model is loaded: generating would fail the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr("trainctl.eval.core.evaluate", refuse)


def test_a_model_option_that_is_not_downloaded(cli, arith_data):
    result = cli("eval", "qwen2.5-0.5b")
    assert result.exit_code == 1
    assert "model=qwen2.5-0.5b is not downloaded" in result.stderr
    assert "Hint: trainctl model pull qwen2.5-0.5b" in result.stderr


def test_a_name_that_is_nothing(cli):
    result = cli("eval", "qwen2.5-7", "data=arith")
    assert result.exit_code == 1
    assert "no model, run or checkpoint 'qwen2.5-7'" in result.stderr
    assert "Hint: trainctl eval qwen2.5-7b" in result.stderr


def test_a_path_that_does_not_exist(cli):
    result = cli("eval", "runs/nope")
    assert result.exit_code == 1
    assert "runs/nope does not exist" in result.stderr


def test_a_run_without_checkpoints(cli, tmp_path):
    run = tmp_path / "work" / "runs" / "empty"
    (run / "checkpoints").mkdir(parents=True)
    (run / "run.json").write_text('{"args": []}')
    result = cli("eval", str(run))
    assert result.exit_code == 1
    assert "has no checkpoints yet" in result.stderr


def test_data_without_a_test_split(cli, tiny_model, arith_data):
    result = cli("eval", "tiny", "data.val_files=null")
    assert result.exit_code == 1
    assert "data=arith has no test split (data.val_files is not set)" in result.stderr
    assert "Hint: data.val_files=" in result.stderr


def test_data_whose_test_file_is_missing(cli, tiny_model, arith_data):
    (arith_data / "rl" / "test.parquet").unlink()
    result = cli("eval", "tiny")
    assert result.exit_code == 1
    assert "the test split" in result.stderr and "does not exist" in result.stderr
    assert "Hint: trainctl data prep arith" in result.stderr


def test_a_data_source_no_reward_scores(cli, tiny_model, arith_data, tmp_path):
    from trainctl.data.arith import rows
    from trainctl.data.writer import write_rows

    bad = [dict(r, data_source="my/puzzles") for r in rows("rl", "test", 8, 0)]
    test = tmp_path / "puzzles.parquet"
    write_rows(test, bad)
    result = cli("eval", "tiny", f"data.val_files={test}")
    assert result.exit_code == 1
    assert "no reward function for data_source 'my/puzzles' (8 rows): nothing scores them." in result.stderr
    assert "Hint: name your scorer: reward=fn reward.fn=" in result.stderr


def test_fewer_samples_than_k(cli, tiny_model, arith_data):
    result = cli("eval", "tiny", "n=4", "k=1,8", "temperature=0.7")
    assert result.exit_code == 1
    assert "pass@8 needs at least 8 samples per prompt, but n=4" in result.stderr
    assert "Hint: n=8, or k=1" in result.stderr


def test_bad_sampling_values_are_usage_errors(cli, tiny_model, arith_data):
    result = cli("eval", "tiny", "n=many")
    assert result.exit_code == 2
    assert "n=many: not an integer" in result.stderr


def test_each_checkpoint_needs_a_run(cli, tiny_model, arith_data):
    result = cli("eval", "tiny", "--each-checkpoint")
    assert result.exit_code == 2
    assert "--each-checkpoint needs a run or checkpoints folder" in result.stderr


def test_help_is_instant_and_imports_nothing_heavy():
    import subprocess

    code = "import sys; from trainctl.cli.main import main\ntry: main(['eval', '--help'])\nexcept SystemExit: pass\n"
    heavy = ("torch", "verl", "transformers", "ray", "lm_eval", "datasets")
    code += f"print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "Score a model, a run or a checkpoint" in out
    assert out.strip().endswith("[]"), out


def test_a_reward_model_served_by_verl_cannot_score_here(cli, tiny_model, arith_data):
    """The reward kind says so before anything loads: eval scores in its own process (on a GPU, verl's servers
    would; on the CPU trainctl's manager scores whatever samples)."""
    result = cli("eval", "tiny", "data=arith", "reward=model", "reward.model=tiny-rm", "hardware=1gpu")
    assert result.exit_code == 1
    assert "eval scores in this process; reward=model on vllm/sglang is served by verl's reward-model servers." in (
        result.stderr
    )
    assert "hardware.rollout_engine=hf" in result.stderr
