"""`trainctl train --dry-run`: the plan, sweeps, and what is (not) started."""

from __future__ import annotations

import yaml


def test_dry_run_prints_the_plan(cli, tiny_model, arith_data, no_processes):
    result = cli("train", "recipe=quickstart", "--dry-run")
    assert result.exit_code == 0, result.output
    out = result.stdout
    header = "Plan: sft on model=tiny with data=arith, hardware=cpu (1 node x 1 process, local), loggers: console, file"
    assert header in out
    assert "Backend: verl sft_trainer" in out
    # the resolved config, as YAML
    config = out.split("Config (trainctl config show):\n", 1)[1].split("\n\n", 1)[0]
    tree = yaml.safe_load("\n".join(line[2:] for line in config.splitlines()))
    assert tree["run"]["name"] == "quickstart" and tree["model"]["path"].endswith("/models/tiny")
    # the exact launch command, and the numbers users ask about
    # one process: the trainer itself, in a process group of one (no torchrun agent)
    assert "MASTER_ADDR=127.0.0.1 MASTER_PORT=0 " in out
    assert "/python -u -m verl.trainer.sft_trainer --config-path=" in out
    assert "torchrun" not in out
    assert "steps per epoch              16          512 rows // 32 (last partial batch dropped)" in out
    assert "gradient accumulation steps  1           32 / 32" in out
    assert out.rstrip().endswith("Dry run: nothing was started.")
    assert result.stderr == ""  # model and data are present: no warnings
    assert not no_processes
    assert not (tiny_model.parent.parent.parent / "work" / "runs").exists(), "a dry run writes nothing"


def test_missing_model_and_data_are_warnings_on_dry_run(cli):
    result = cli("train", "algorithm=grpo", "model=qwen2.5-7b", "data=gsm8k", "hardware=8gpu", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "Hint: run: trainctl model pull qwen2.5-7b" in result.stderr
    assert "Hint: run: trainctl data prep gsm8k" in result.stderr


def test_ppo_numbers(cli):
    result = cli("train", "recipe=grpo-gsm8k-qwen2.5-7b", "--dry-run")
    assert result.exit_code == 0, result.output
    out = result.stdout
    for line in [
        "  sequences per step            5120        1024 prompts x rollout.n 5",
        "  data-parallel ranks           8           1 node x 8",
        "  policy updates per step       4           1024 / ppo_mini_batch_size 256 x ppo_epochs 1",
        "  sequences per GPU per update  160         256 x 5 / 8",
        "  gradient accumulation steps   10          160 / 16",
        "  rollout replicas              4           8 GPUs / tensor parallel 2",
    ]:
        assert line in out.splitlines(), line


def test_sweep_prints_one_plan_per_point(cli):
    result = cli("train", "-m", "algorithm=grpo,dapo", "model=qwen2.5-7b,qwen3-8b", "hardware=8gpu", "--dry-run")
    assert result.exit_code == 0, result.output
    for i, (a, m) in enumerate(
        [("grpo", "qwen2.5-7b"), ("grpo", "qwen3-8b"), ("dapo", "qwen2.5-7b"), ("dapo", "qwen3-8b")]
    ):
        assert f"Sweep point {i + 1}/4: algorithm={a} model={m} hardware=8gpu" in result.stdout
        assert f"Plan: {a} on model={m}" in result.stdout


def test_several_problems_are_numbered(cli):
    result = cli("train", "algorithm=grpo", "hardware=2x8gpu", "data.train_batch_size=100", "foo.bar=1", "--dry-run")
    assert result.exit_code == 1
    assert "Error: 3 problems in this config:" in result.stderr
    assert "  1. unknown config key 'foo.bar'." in result.stderr
    assert "     Hint: smallest fix: data.train_batch_size=96 or 112" in result.stderr
