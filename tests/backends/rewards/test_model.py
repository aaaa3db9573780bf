"""reward=model: the reward model is looked up where the composition looks (the user's --config-dir and ./conf before
the built-in options), and translated into verl's reward-model servers on a GPU engine or trainctl's manager on hf."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from trainctl.plan import resolve

GRPO = ["recipe=grpo-arith-tiny-cpu"]
# a reward model option of the user's, whose weights live somewhere of its own (not <paths.models>/NAME)
OPTION = """\
# team-rm: our reward model
defaults:
  - _base
  - _self_

name: team-rm
kind: reward
context_length: 1024
path: ${paths.home}/team-models/team-rm
"""


@pytest.fixture
def team_rm(isolated, tiny_reward_model_dir) -> Path:
    target = isolated / "team-models" / "team-rm"
    shutil.copytree(tiny_reward_model_dir, target)
    return target


def _write_option(conf: Path) -> None:
    (conf / "model").mkdir(parents=True)
    (conf / "model" / "team-rm.yaml").write_text(OPTION)


def test_a_reward_model_option_in_a_config_dir(cli, tiny_model, arith_data, team_rm, tmp_path, no_processes):
    _write_option(tmp_path / "team-conf")
    args = [*GRPO, "--config-dir", str(tmp_path / "team-conf"), "reward=model", "reward.model=team-rm"]
    result = cli("config", "validate", *args)
    assert result.exit_code == 0, result.output
    shown = cli("config", "show", *args, "--backend")
    assert f"model_path: {team_rm}" in shown.stdout
    # without the folder, no such option
    missing = cli("config", "validate", *GRPO, "reward=model", "reward.model=team-rm")
    assert missing.exit_code == 1
    assert "Error: reward.model = 'team-rm' is neither a model option nor a model folder." in missing.stderr


def test_a_reward_model_option_in_dot_conf(cli, tiny_model, arith_data, team_rm, no_processes):
    _write_option(Path.cwd() / "conf")
    result = cli("config", "validate", *GRPO, "reward=model", "reward.model=team-rm")
    assert result.exit_code == 0, result.output


def test_a_user_option_not_pulled_yet_says_how_to_get_it(cli, tiny_model, arith_data, tmp_path, no_processes):
    _write_option(tmp_path / "team-conf")
    args = [*GRPO, "--config-dir", str(tmp_path / "team-conf"), "reward=model", "reward.model=team-rm"]
    planned = cli("train", *args, "--dry-run")
    assert planned.exit_code == 0, planned.output
    assert "Warning: reward.model = team-rm is not at" in planned.stderr
    assert "team-models/team-rm (no config.json there)" in planned.stderr
    assert "Hint: run: trainctl model pull team-rm" in planned.stderr


def test_on_a_gpu_engine_verls_reward_model_servers_score():
    plan = resolve(
        ["algorithm=ppo", "model=qwen2.5-7b", "data=gsm8k", "hardware=8gpu", "reward=model",
         "reward.model=skywork-reward-llama3.1-8b", "reward.tp=2", "reward.offload=false"]
    )  # fmt: skip
    leaves = plan.built.leaves
    assert leaves["reward.reward_model.enable"] is True
    assert leaves["reward.reward_model.model_path"].endswith("/models/skywork-reward-llama3.1-8b")
    assert leaves["reward.reward_model.rollout.name"] == "vllm"
    assert leaves["reward.reward_model.rollout.tensor_model_parallel_size"] == 2
    assert leaves["reward.reward_model.rollout.free_cache_engine"] is False
    assert not any(k.startswith(("reward.reward_manager", "reward.reward_kwargs")) for k in leaves)
    assert plan.built.origins["reward.reward_model.enable"] == "reward=model (trainctl.backends.rewards.model)"


def test_on_the_cpu_trainctls_manager_scores_in_the_reward_worker():
    plan = resolve([*GRPO, "reward=model", "reward.model=tiny-rm", "reward.micro_batch_size=2"])
    leaves = plan.built.leaves
    assert leaves["reward.reward_manager.name"] == "SequenceClassifierRewardManager"
    assert leaves["reward.reward_manager.module.path"] == "pkg://trainctl.runtime.reward_model"
    assert leaves["reward.reward_kwargs.trainctl.micro_batch_size"] == 2
    assert leaves["reward.reward_kwargs.trainctl.model_path"].endswith("/models/tiny-rm")
    assert not any(k.startswith("reward.reward_model.") for k in leaves)
