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


def test_the_tiny_reward_model_is_built_and_listed_as_one(cli, isolated):
    result = cli("model", "init", "tiny-rm")
    assert result.exit_code == 0 and "Built: tiny reward model at" in result.stdout
    config = (isolated / "models" / "tiny-rm" / "config.json").read_text()
    assert "Qwen2ForSequenceClassification" in config and '"LABEL_0"' in config
    lines = {ln.split()[0]: ln.split() for ln in cli("model", "ls").stdout.splitlines()[1:] if ln.strip()}
    assert lines["tiny-rm"][1:3] == ["reward", "-"] and lines["tiny-rm"][3] == "complete"
    assert lines["skywork-reward-llama3.1-8b"][1:3] == ["reward", "Skywork/Skywork-Reward-Llama-3.1-8B-v0.2"]
    assert lines["tiny"][1] == "causal-lm"
    pulled = cli("model", "pull", "tiny-rm")
    assert pulled.exit_code == 1 and "Hint: trainctl model init tiny-rm" in pulled.stderr


def test_init_of_a_hub_model_says_to_pull_it(cli):
    result = cli("model", "init", "qwen2.5-7b")
    assert result.exit_code == 1
    assert "Hint: trainctl model pull qwen2.5-7b" in result.stderr


def test_info_with_a_bad_override_exits_1(cli):
    result = cli("model", "info", "qwen2.5-7b", "hardware.gpus_per_node=abc")
    assert result.exit_code == 1
    assert "hardware.gpus_per_node must be an integer, not 'abc'." in result.stderr
