"""trainctl.suggest: the did-you-mean guesses every error message uses."""

from __future__ import annotations

from trainctl.suggest import closest, closest_key

KNOWN = {
    "algorithm",
    "algorithm.kl_ctrl",
    "algorithm.kl_ctrl.kl_coef",
    "algorithm.kl_ctrl.type",
    "actor_rollout_ref",
    "actor_rollout_ref.actor",
    "actor_rollout_ref.actor.optim",
    "actor_rollout_ref.actor.optim.lr",
    "critic.optim.lr_warmup_steps",
    "data.train_batch_size",
}


def test_a_close_sibling_under_the_longest_existing_prefix():
    assert closest_key("algorithm.kl_ctrl.kl_coeff", KNOWN) == "algorithm.kl_ctrl.kl_coef"


def test_the_same_tail_under_another_parent_the_shortest_first():
    assert closest_key("actor.optim.lr", KNOWN) == "actor_rollout_ref.actor.optim.lr"
    assert closest_key("optim.lr", KNOWN | {"x.actor.optim.lr"}) == "x.actor.optim.lr"


def test_a_close_match_on_the_whole_path_and_nothing_when_nothing_is_close():
    assert closest_key("data.train_batch_sise", KNOWN - {"data"}) == "data.train_batch_size"
    assert closest_key("algorithm.kl_ctrl.something_else", KNOWN) is None
    assert closest_key("trainer.total_epochs", KNOWN) is None


def test_closest_words_best_first():
    assert closest("--dryrun", ["--dry-run", "--detach", "--resume"]) == ["--dry-run"]
    assert closest("grpo", ["gspo", "grpo", "ppo"], n=2) == ["grpo", "gspo"]
    assert closest("zzz", ["grpo"]) == []
