"""`trainctl config show / validate / groups`."""

from __future__ import annotations

import yaml


def test_show_prints_the_trainctl_config(cli):
    result = cli("config", "show", "algorithm=grpo", "model=qwen3-8b", "run.epochs=3")
    assert result.exit_code == 0, result.output
    tree = yaml.safe_load(result.stdout)
    assert list(tree)[:12] == [
        "algorithm", "model", "data", "reward", "env", "distillation", "offpolicy", "tools", "hardware", "logger",
        "lora", "run",
    ]  # fmt: skip
    assert tree["model"]["name"] == "qwen3-8b" and tree["run"]["epochs"] == 3
    assert tree["verl"]["algorithm"]["adv_estimator"] == "grpo"


def test_show_backend_prints_verls_config(cli):
    result = cli("config", "show", "algorithm=grpo", "hardware=8gpu", "--backend")
    assert result.exit_code == 0, result.output
    tree = yaml.safe_load(result.stdout)
    assert tree["algorithm"]["adv_estimator"] == "grpo"
    assert tree["trainer"]["n_gpus_per_node"] == 8
    assert tree["actor_rollout_ref"]["rollout"]["n"] == 5


def test_show_origin_names_files_and_overrides(cli):
    result = cli("config", "show", "recipe=quickstart", "run.seed=7", "--origin")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "  seed: 7  # command line" in lines
    assert "  name: quickstart  # recipes/quickstart.yaml" in lines
    assert "  fsdp_strategy: fsdp2  # conf/hardware/cpu.yaml" in lines
    backend = cli("config", "show", "recipe=quickstart", "--backend", "--origin").stdout.splitlines()
    assert "  lr: 0.001  # recipes/quickstart.yaml" in backend
    assert "  n_gpus_per_node: 1  # conf/mapping/verl_sft.yaml" in backend
    assert "  weight_decay: 0.01  # verl sft_trainer default" in backend


def test_validate_exit_codes(cli, tiny_model):
    ok = cli("config", "validate", "algorithm=ppo", "hardware=8gpu")
    assert ok.exit_code == 0, ok.output
    assert "OK: ppo on verl main_ppo is valid." in ok.stdout
    bad = cli("config", "validate", "algorithm=ppo", "critic.optim.lrr=1")
    assert bad.exit_code == 1
    assert "Did you mean 'critic.optim.lr'?" in bad.stderr


def test_groups_lists_every_option_with_a_description(cli):
    result = cli("config", "groups")
    assert result.exit_code == 0
    out = result.stdout
    for option, words in [
        ("grpo", "Group Relative Policy Optimization"),
        ("gspo", "Group Sequence Policy Optimization"),
        ("dapo", "Decoupled Clip and Dynamic sAmpling"),
        ("qwen2.5-72b", "72.7B"),
        ("2x8gpu", "two nodes"),
        ("quickstart", "Quickstart"),
        # issue 47: the TRL methods beside DPO, reward models and on-policy distillation
        ("kto", "Kahneman-Tversky Optimization"),
        ("orpo", "Odds Ratio Preference Optimization"),
        ("simpo", "Simple Preference Optimization"),
        ("rm", "a reward model trained on chosen/rejected pairs"),
        ("distill", "on-policy distillation"),
        ("distill-arith-tiny-cpu", "On-policy distillation of the random tiny model"),
    ]:
        assert any(option in line and words in line for line in out.splitlines()), option


def test_groups_shows_the_users_own_options(cli, tmp_path):
    (tmp_path / "work" / "conf" / "model").mkdir(parents=True)
    (tmp_path / "work" / "conf" / "model" / "ours.yaml").write_text("# our 7B fine-tune\nname: ours\n")
    out = cli("config", "groups").stdout
    assert any("ours" in line and "our 7B fine-tune" in line for line in out.splitlines())


def test_show_shows_a_config_with_a_data_problem_and_warns(cli, tiny_model, arith_data):
    """512 arith rows and GRPO's 1024 prompts a step: `show` prints the config and the problem, exit 0;
    `validate` refuses it."""
    result = cli("config", "show", "algorithm=grpo", "--backend")
    assert result.exit_code == 0, result.output
    assert "train_batch_size: 1024" in result.stdout
    assert "Warning: The training file has fewer rows than one step takes: 512 rows < data.train_batch_size = 1024" in (
        result.stderr
    )
    assert "would stop `trainctl train` and `trainctl config validate`" in result.stderr
    assert cli("config", "validate", "algorithm=grpo").exit_code == 1


def test_show_still_refuses_what_cannot_be_composed(cli):
    result = cli("config", "show", "algorithm=grpoo")
    assert result.exit_code == 1 and "Did you mean 'grpo'?" in result.stderr


def test_the_plan_header_names_the_loggers_really_used(cli):
    result = cli("train", "algorithm=grpo", "hardware=8gpu", "trainer.logger=[console,wandb]", "--dry-run")
    assert result.exit_code == 0, result.output
    # the run's own metrics record (verl's file logger) is always added
    assert "loggers: file, console, wandb" in result.stdout


def test_the_groups_bases_are_never_offered_as_options(cli):
    """conf/<group>/_base.yaml and conf/algorithm/_ppo.yaml are what options inherit, not options."""
    words = cli("config", "groups").stdout.split()
    assert "grpo" in words and "_base" not in words and "_ppo" not in words
    for group, typed in [("algorithm", "_ppo"), ("algorithm", "_base"), ("algorithm", "_pp"), ("data", "_base")]:
        result = cli("config", "show", f"{group}={typed}")
        assert result.exit_code == 1
        assert f"unknown {group} '{typed}'" in result.stderr
        offered = result.stderr.split(f"available {group} options: ")[1].split(" (")[0].split(", ")
        assert "ppo" in offered or "gsm8k" in offered
        assert not any(o.startswith("_") for o in offered), offered
        assert "Did you mean '_" not in result.stderr
