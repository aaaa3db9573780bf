"""Values pasted from verl scripts with mistakes in them: each one is refused by `trainctl config validate` before
anything starts, naming the key, the value, what the backend declares and a fix; the check is generic."""

from __future__ import annotations

import pytest

R = "actor_rollout_ref"

# (id, arguments, lines that must appear in stderr)
MISTAKES = [
    (
        "actor lr not a number",
        ["algorithm=grpo", f"{R}.actor.optim.lr=abc"],
        [
            f"Error: {R}.actor.optim.lr must be a number, not 'abc'.",
            "  declared by verl's FSDPOptimizerConfig.lr",
            f"Hint: {R}.actor.optim.lr=1e-06  (verl's default)",
        ],
    ),
    (
        "critic lr not a number",
        ["algorithm=ppo", "critic.optim.lr=abc"],
        ["Error: critic.optim.lr must be a number, not 'abc'.", "  declared by verl's FSDPOptimizerConfig.lr"],
    ),
    (
        "a bool that is not one",
        ["algorithm=grpo", "algorithm.use_kl_in_reward=maybe"],
        [
            "Error: algorithm.use_kl_in_reward must be true or false, not 'maybe'.",
            "  declared by verl's AlgoConfig.use_kl_in_reward",
            "Hint: algorithm.use_kl_in_reward=false  (verl's default)",
        ],
    ),
    (
        "negative temperature",
        ["algorithm=grpo", f"{R}.rollout.temperature=-1"],
        [
            f"Error: {R}.rollout.temperature = -1 is out of range: it must be at least 0.",
            "  declared by verl's RolloutConfig.temperature",
            f"Hint: {R}.rollout.temperature=1.0  (verl's default)",
        ],
    ),
    (
        "memory share above one",
        ["algorithm=grpo", "hardware=8gpu", f"{R}.rollout.gpu_memory_utilization=1.5"],
        [f"Error: {R}.rollout.gpu_memory_utilization = 1.5 is out of range: it must be in (0, 1]."],
    ),
    (
        "zero epochs in verl's own key",
        ["algorithm=grpo", "trainer.total_epochs=0"],
        [
            "Error: trainer.total_epochs = 0 is out of range: it must be at least 1.",
            "Hint: trainer.total_epochs=30  (verl's default)",
        ],
    ),
    (
        "DPO learning rate not a number",
        ["algorithm=dpo", "data=hh-rlhf", "learning_rate=abc"],
        [
            "Error: learning_rate must be a number, not 'abc'.",
            "  declared by TRL's DPOConfig.learning_rate",
        ],
    ),
    (
        "a field a dataclass does not have",
        ["algorithm=grpo", f"+{R}.actor.optim.lrr=1e-6"],
        [
            f"Error: unknown field 'lrr' in {R}.actor.optim: verl's FSDPOptimizerConfig has no such field.",
            f"  Did you mean '{R}.actor.optim.lr'?",
            f"Hint: {R}.actor.optim.lr=1e-06",
        ],
    ),
    (
        "trainctl's own value in a group key",
        ["hardware.gpu_memory_utilization=1.5"],
        ["Error: hardware.gpu_memory_utilization = 1.5 is out of range: it must be in the range (0, 1]."],
    ),
    (
        "trainctl choice with a near miss",
        ["hardware.launcher=ray_jobs"],
        [
            "Error: hardware.launcher = 'ray_jobs' is not one of: local, ray_cluster, ray_job, slurm.",
            "Hint: hardware.launcher=ray_job",
        ],
    ),
]


@pytest.mark.parametrize(("args", "lines"), [m[1:] for m in MISTAKES], ids=[m[0] for m in MISTAKES])
def test_config_validate_refuses_each_mistake(args, lines, cli, tiny_model, no_processes):
    result = cli("config", "validate", *args)
    assert result.exit_code == 1, result.output
    got = result.stderr.splitlines()
    for line in lines:
        assert line in got, f"missing line:\n{line}\n--- stderr ---\n{result.stderr}"
    assert "OK:" not in result.stdout
    assert not no_processes


def test_the_check_is_generic(cli, tiny_model, no_processes):
    """Fields trainctl names nowhere are checked from verl's declarations like any other."""
    import trainctl

    field = "expert_parallel_size"
    assert field.rpartition(".")[2] not in _trainctl_source(trainctl)
    result = cli("config", "validate", "algorithm=grpo", f"{R}.rollout.{field}=long")
    assert result.exit_code == 1, result.output
    assert f"Error: {R}.rollout.{field} must be an integer, not 'long'." in result.stderr
    assert "declared by verl's RolloutConfig.expert_parallel_size" in result.stderr

    result = cli("config", "validate", "algorithm=grpo", "algorithm.filter_groups.enable=sometimes")
    assert result.exit_code == 1
    assert "declared by verl's FilterGroupsConfig.enable" in result.stderr


def test_a_good_value_passes_the_type_check(cli, tiny_model):
    """An int for a float field, null for an optional one: what verl accepts passes."""
    result = cli("config", "show", "algorithm=grpo", f"{R}.actor.optim.lr=1", f"{R}.rollout.temperature=0", "--backend")
    assert result.exit_code == 0, result.output


def _trainctl_source(package) -> str:
    from pathlib import Path

    root = Path(package.__file__).parent
    return "\n".join(p.read_text() for p in root.rglob("*.py")) + "\n".join(
        p.read_text() for p in (root.parent.parent / "conf").rglob("*.yaml")
    )
