"""offpolicy (issue 56): every combination verl asserts on at run time, ignores, or this machine cannot host, refused
before anything starts with one message naming the key, the numbers and a fix; every shipped recipe with
offpolicy=overlap passes or names the problem."""

from __future__ import annotations

import pytest

from tests.config.test_compose import RECIPES
from trainctl.plan import make_plan

TINY = "recipe=grpo-arith-tiny-cpu"
SPLIT_GPU = [TINY, "offpolicy=split", "hardware=8gpu", "hardware.rollout_engine=vllm"]

# (overrides, the lines the error must hold)
BAD = {
    "sft": (
        ["recipe=quickstart", "offpolicy=overlap"],
        ["offpolicy=overlap with algorithm=sft: off-policy training and its correction are verl's PPO family's",
         "Hint: offpolicy=off, or a PPO-family algorithm: algorithm=grpo"],
    ),
    "dpo": (["recipe=dpo-arith-tiny-cpu", "offpolicy=split"], ["offpolicy=split with algorithm=dpo:"]),
    "legacy trainer": (
        [TINY, "algorithm=remax", "offpolicy=overlap"],
        ["offpolicy=overlap with algorithm=remax: it runs on verl's legacy trainer (trainer.use_v1 = false)"],
    ),
    "negative staleness": (
        [TINY, "offpolicy=overlap", "offpolicy.max_staleness=-1"],
        ["offpolicy.max_staleness = -1: a sample cannot lag fewer than 0 policy versions (verl's "
         "max_off_policy_threshold, max_staleness + 1 = 0, must be an integer of at least 1",
         "Hint: offpolicy.max_staleness=1"],
    ),
    "on-policy cap, drop": (
        [TINY, "offpolicy=overlap", "offpolicy.max_staleness=0", "offpolicy.on_stale=drop"],
        ["offpolicy.max_staleness = 0 with offpolicy=overlap: every sample must come from the current policy, so "
         "every sample generated ahead is older than that at the next step and is dropped",
         "Hint: offpolicy=off (on-policy)"],
    ),
    "on-policy cap, wait": (
        [TINY, "offpolicy=overlap", "offpolicy.max_staleness=0"],
        ["training waits at every step for every prompt in flight to finish"],
    ),
    "correction without log-probs": (
        [TINY, "offpolicy=overlap", "actor_rollout_ref.rollout.calculate_log_probs=false"],
        ["offpolicy.correction = tis needs the rollout's log-probs, but "
         "actor_rollout_ref.rollout.calculate_log_probs = false: verl then skips the correction without a word"],
    ),
    "icepop's floor on tis": (
        [TINY, "offpolicy=overlap", "offpolicy.is_floor=0.2"],
        ["offpolicy.is_floor = 0.2 with offpolicy.correction = tis: the lower bound is icepop's"],
    ),
    "split on cpu with vllm": (
        [TINY, "offpolicy=split", "hardware.rollout_engine=vllm"],
        ["offpolicy=split on hardware=cpu with actor_rollout_ref.rollout.name = vllm: on cpu the rollout pool gets its "
         "weights through trainctl's gloo checkpoint engine, which has fed trainctl's hf rollout only",
         "Hint: hardware.rollout_engine=hf, or offpolicy=overlap"],
    ),
    "split on cpu without room": (
        [TINY, "offpolicy=split", "offpolicy.rollout_gpus=2"],
        ["offpolicy=split on hardware=cpu: 1 training + 2 rollout process(es) + verl's TransferQueue actors (2 CPUs) "
         "hold 5 Ray CPUs, and hardware.ray_num_cpus = 4.", "Hint: hardware.ray_num_cpus=5"],
    ),
    "split with lora unmerged": (
        [TINY, "offpolicy=split", "lora=r8", "actor_rollout_ref.model.lora.merge=false"],
        ["offpolicy=split with lora (rank 8) and actor_rollout_ref.model.lora.merge = false: verl's separate_async "
         "sends the engine's weights without their peft_config"],
    ),
    "split: batch against sync interval": (
        [*SPLIT_GPU, "offpolicy.sync_every=4"],
        ["data.train_batch_size = 8 is not offpolicy.sync_every x ppo_mini_batch_size = 4 x 8 = 32: verl's "
         "separate_async", "Hint: offpolicy.sync_every=1, or offpolicy.sync_every=null"],
    ),
    "split: the naive engine": (
        [*SPLIT_GPU, "actor_rollout_ref.rollout.checkpoint_engine.backend=naive"],
        ["actor_rollout_ref.rollout.checkpoint_engine.backend = naive with offpolicy=split"],
    ),
    "split: one device": (
        [TINY, "offpolicy=split", "hardware=1gpu", "hardware.rollout_engine=vllm"],
        ["offpolicy=split on hardware=1gpu (1 devices): rollout 0, training 1; each side needs at least one device"],
    ),
    "split: part of a node on several": (
        [TINY, "offpolicy=split", "hardware=2x8gpu", "hardware.rollout_engine=vllm", "offpolicy.rollout_gpus=4"],
        ["offpolicy.rollout_gpus = 4 on hardware=2x8gpu (2 nodes x 8): on several nodes the rollout pool takes "
         "whole nodes.", "Hint: offpolicy.rollout_gpus=8"],
    ),
    "a trainer mode by hand": (
        [TINY, "trainer.v1.trainer_mode=colocate_async"],
        ["trainer.v1.trainer_mode = colocate_async beside offpolicy=off: the offpolicy group says the trainer mode",
         "Hint: offpolicy=overlap, and drop trainer.v1.trainer_mode"],
    ),
    "a trainer mode by hand against offpolicy": (
        [TINY, "offpolicy=overlap", "trainer.v1.trainer_mode=sync"],
        ["trainer.v1.trainer_mode = sync beside offpolicy=overlap", "Hint: offpolicy=off, and drop"],
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BAD))
def test_each_bad_combination_is_one_message_before_anything_starts(case, cli, isolated):
    words, lines = BAD[case]
    result = cli("config", "validate", *words)
    assert result.exit_code == 1, result.output
    said = " ".join(result.stderr.split())
    for line in lines:
        assert " ".join(line.split()) in said, said
    assert not list(isolated.parent.joinpath("work").iterdir()), "nothing written"


def test_train_refuses_before_anything_starts(cli, isolated, no_processes):
    result = cli("train", TINY, "offpolicy=split", "lora=r8", "actor_rollout_ref.model.lora.merge=false")
    assert result.exit_code == 1 and "offpolicy=split with lora (rank 8)" in result.stderr
    assert not (isolated.parent / "work" / "runs").exists()


def test_split_on_cpu_is_valid_with_the_gloo_engine(cli, isolated):
    result = cli("config", "validate", TINY, "offpolicy=split")
    assert result.exit_code == 0, result.output


def test_prefetching_past_a_dropping_cap_is_a_warning():
    plan = make_plan(
        [TINY, "offpolicy=overlap", "offpolicy.prefetch_batches=2", "offpolicy.on_stale=drop"], native=False
    )
    assert plan.errors == []
    (warning,) = [w for w in plan.warnings if w.key == "offpolicy.prefetch_batches"]
    assert "runs generation 2 steps ahead, past offpolicy.max_staleness = 1 with on_stale=drop" in warning.message
    assert warning.hint == "offpolicy.prefetch_batches=1, offpolicy.max_staleness=2, or offpolicy.on_stale=wait"


def test_the_shipped_options_pass_where_they_can_run():
    for words in (
        [TINY, "offpolicy=overlap"],
        [*SPLIT_GPU],
        [TINY, "offpolicy=overlap", "offpolicy.correction=icepop"],
    ):
        plan = make_plan(words, native=False)
        assert plan.errors == [], (words, [p.message for p in plan.errors])
        assert not [w for w in plan.warnings if (w.key or "").startswith("offpolicy")], words


@pytest.mark.parametrize("recipe", RECIPES)
def test_every_recipe_with_overlap_passes_or_names_the_problem(recipe, isolated):
    plan = make_plan([f"recipe={recipe}", "offpolicy=overlap"], native=False, strict=False)
    offpolicy = [p for p in plan.errors if (p.key or "").startswith("offpolicy")]
    if plan.cfg.family != "ppo":
        (problem,) = offpolicy
        assert f"offpolicy=overlap with algorithm={plan.cfg.algorithm.name}:" in problem.message
    else:
        assert offpolicy == [], [p.message for p in offpolicy]
        assert plan.value("trainer.v1.trainer_mode") == "colocate_async"
