"""trainctl keeps verl 0.9.1's registries as constants (importing verl to ask costs seconds): they must match."""

from __future__ import annotations

from trainctl.facts import verl as facts


def test_registries_match_installed_verl():
    import importlib.metadata

    from verl.experimental.reward_loop.reward_manager import registry as rm
    from verl.trainer.ppo import core_algos
    from verl.utils.tracking import Tracking
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    assert importlib.metadata.version("verl") == facts.VERL_VERSION
    assert set(core_algos.ADV_ESTIMATOR_REGISTRY) == set(facts.ADV_ESTIMATORS)
    assert set(core_algos.POLICY_LOSS_REGISTRY) == set(facts.POLICY_LOSSES)
    assert set(rm.REWARD_MANAGER) == set(facts.REWARD_MANAGERS)
    assert set(Tracking.supported_backend) == set(facts.LOGGERS)
    builtin = {k for k in RolloutReplicaRegistry._registry if k not in facts.TRAINCTL_ROLLOUTS}
    assert builtin == set(facts.VERL_ROLLOUTS)


def test_legacy_reward_keys_exist_and_are_ignored_by_main_ppo():
    import inspect

    import verl.trainer.main_ppo as main_ppo

    from trainctl.backends.verl import verl_defaults

    tree = verl_defaults("ppo_trainer")
    for old in facts.LEGACY_REWARD_KEYS:
        node = tree
        for part in old.split("."):
            node = node[part]
    # main_ppo never calls the migration that would honour them
    assert "migrate_legacy_reward_impl" not in inspect.getsource(main_ppo)


def test_scored_data_sources_match_verls_dispatch():
    import inspect

    from verl.utils.reward_score import default_compute_score

    source = inspect.getsource(default_compute_score)
    for name in facts.SCORED_DATA_SOURCES:
        assert f'"{name}"' in source, f"verl no longer scores {name}"
    for prefix in facts.SCORED_DATA_SOURCE_PREFIXES:
        assert f'startswith("{prefix}")' in source
    try:
        default_compute_score("not/a-scored-source", "x", "y")
        raise AssertionError("verl scored an unknown data_source")
    except NotImplementedError:
        pass


def test_the_reward_node_keys_are_verls():
    """Every key directly under verl's `reward` node is one trainctl leaves to verl on the command line."""
    import dataclasses

    from verl.workers.config import RewardConfig

    from trainctl.backends.verl import verl_default_tree

    node = set(verl_default_tree("ppo_trainer")["reward"]) - {"_target_"}
    fields = {f.name for f in dataclasses.fields(RewardConfig) if not f.name.startswith("_")}
    assert node | fields | {"reward_kwargs"} == set(facts.REWARD_NODE_KEYS)
