"""`trainctl model ...` (trainctl.cli.model): exit codes and output of each command."""

from __future__ import annotations

import json
import re
import shutil


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


def test_a_seed_for_a_model_without_a_warm_start_is_refused(cli, isolated):
    result = cli("model", "init", "tiny", "--seed", "3")
    assert result.exit_code == 1
    assert "--seed 3: only tiny-tools has a warm start" in result.stderr
    assert "Hint: trainctl model init tiny" in result.stderr


def test_info_with_a_bad_override_exits_1(cli):
    result = cli("model", "info", "qwen2.5-7b", "hardware.gpus_per_node=abc")
    assert result.exit_code == 1
    assert "hardware.gpus_per_node must be an integer, not 'abc'." in result.stderr


def test_the_tool_model_is_the_shipped_warm_start_and_says_how_it_ended(cli, isolated):
    """In a fresh home `model init tiny-tools` copies the warm start trainctl ships (seconds, not its minutes of
    training), and says how that warm start ended, then and when it is already there."""
    target = isolated / "models" / "tiny-tools"
    built = cli("model", "init", "tiny-tools")
    assert built.exit_code == 0 and f"Built: tiny tool-calling model at {target}" in built.stdout, built.output
    again = cli("model", "init", "tiny-tools")
    assert again.exit_code == 0 and f"Already there: tiny tool-calling model at {target}" in again.stdout
    for result in (built, again):
        warm = result.stdout.splitlines()[-1]
        shape = (
            r"Warm start \(the one trainctl ships; --force --train runs it here\): \d+ steps\. Of 32 held-out "
            r"questions it calls the calculator for \d+ \(greedily; \d+% of"
        )
        assert re.match(shape, warm), warm
        assert "copies the expression right into " in warm and "the calculator's answer as the final answer" in warm


def test_train_for_a_model_without_a_warm_start_is_refused(cli, isolated):
    result = cli("model", "init", "tiny-rm", "--train")
    assert result.exit_code == 1
    assert "--train: only tiny-tools has a warm start" in result.stderr and not (isolated / "models").exists()


def test_a_tool_model_from_an_older_trainctl_gets_the_rebuild_command(cli, isolated, tiny_model_dir):
    old = isolated / "models" / "tiny-tools"
    shutil.copytree(tiny_model_dir, old)
    (old / "trainctl-model.json").write_text(json.dumps({"name": "tiny-tools", "source": "trainctl model init"}))
    result = cli("model", "init", "tiny-tools")
    assert result.exit_code == 0 and "Already there: tiny tool-calling model" in result.stdout
    assert "built by an older trainctl" in result.stdout
    assert result.stdout.rstrip().endswith("trainctl model init tiny-tools --force"), result.stdout
