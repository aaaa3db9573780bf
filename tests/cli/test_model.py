"""`trainctl model ...` (trainctl.cli.model): exit codes and output of each command."""

from __future__ import annotations


def test_init_ls_info(cli, isolated):
    result = cli("model", "init", "tiny")
    assert result.exit_code == 0 and "Built: tiny model" in result.stdout
    result = cli("model", "init", "tiny")
    assert result.exit_code == 0 and "Already there" in result.stdout
    result = cli("model", "ls")
    assert result.exit_code == 0 and "tiny" in result.stdout
    result = cli("model", "info", "tiny", "algorithm=grpo")
    assert result.exit_code == 0, result.output
    assert "Qwen2ForCausalLM" in result.stdout and "Memory per process" in result.stdout


def test_init_of_a_hub_model_says_to_pull_it(cli):
    result = cli("model", "init", "qwen2.5-7b")
    assert result.exit_code == 1
    assert "Hint: trainctl model pull qwen2.5-7b" in result.stderr


def test_info_with_a_bad_override_exits_1(cli):
    result = cli("model", "info", "qwen2.5-7b", "hardware.gpus_per_node=abc")
    assert result.exit_code == 1
    assert "hardware.gpus_per_node must be an integer, not 'abc'." in result.stderr
