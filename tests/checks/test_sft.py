"""SFT checks that are warnings: the run goes on, the user learns what verl will do with the setting."""

from __future__ import annotations


def test_a_seed_chosen_for_sft_is_said_to_change_nothing(cli, tiny_model, arith_data, no_processes):
    chosen = cli("train", "recipe=quickstart", "run.seed=3", "--dry-run")
    assert chosen.exit_code == 0, chosen.output
    assert "Warning: run.seed=3 (command line) changes nothing in an SFT run" in chosen.stderr
    assert "Hint: drop run.seed for SFT" in chosen.stderr
    default = cli("train", "recipe=quickstart", "--dry-run")
    assert default.exit_code == 0 and "run.seed" not in default.stderr, "the default seed is not the user's choice"
    grpo = cli("train", "recipe=grpo-arith-tiny-cpu", "run.seed=3", "--dry-run")
    assert grpo.exit_code == 0 and "changes nothing" not in grpo.stderr, "verl's PPO trainer reads it"
