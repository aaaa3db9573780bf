"""The offpolicy group (issue 56) where it lands in verl's config: nothing with off, verl's V1 trainer modes and
sampler with overlap and split, max_staleness k as verl's threshold k + 1, the correction's keys, and split's share of
the devices."""

from __future__ import annotations

import pytest

from trainctl.config.offpolicy import split_layout
from trainctl.plan import resolve

TINY = "recipe=grpo-arith-tiny-cpu"
V1 = "trainer.v1"


def _leaves(*words: str) -> dict:
    return resolve([TINY, *words]).built.leaves


CORRECTION = "algorithm.rollout_correction"
BYPASS = f"{CORRECTION}.bypass_mode"  # set by the tiny recipe (TINY): true in sync with the hf rollout


def test_off_sets_nothing_of_verls():
    default, off = _leaves(), _leaves("offpolicy=off")
    assert default == off
    assert not [k for k in off if k.startswith(f"{V1}.") or (k.startswith(CORRECTION) and k != BYPASS)]
    assert off[BYPASS] is True  # the tiny recipe's own: the hf rollout's log-probs are the old policy's in sync
    assert resolve([TINY]).value(f"{V1}.trainer_mode") == "sync"


def test_overlap_maps_the_mode_the_cap_plus_one_and_tis():
    got = _leaves("offpolicy=overlap", "offpolicy.max_staleness=3", "offpolicy.prefetch_batches=2")
    assert got[f"{V1}.trainer_mode"] == "colocate_async"
    assert got[f"{V1}.sampler.max_off_policy_threshold"] == 4  # verl counts the versions a sample spans: k + 1
    assert got[f"{V1}.sampler.max_off_policy_strategy"] == "wait"
    assert got[f"{V1}.colocate_async.num_warmup_batches"] == 2
    assert f"{V1}.separate_async.num_warmup_batches" not in got
    assert got["algorithm.rollout_correction.rollout_is"] == "token"
    assert got["algorithm.rollout_correction.rollout_is_threshold"] == 2.0
    assert (
        _leaves("offpolicy=overlap", "offpolicy.max_staleness=null")[f"{V1}.sampler.max_off_policy_threshold"] is None
    )


@pytest.mark.parametrize(
    ("words", "threshold"),
    [
        (["offpolicy.correction=icepop"], "0.5_5.0"),
        (["offpolicy.correction=icepop", "offpolicy.is_floor=0.8", "offpolicy.is_cap=1.5"], "0.8_1.5"),
        (["offpolicy.is_cap=3"], 3),
    ],
)
def test_the_correction_bounds(words, threshold):
    assert _leaves("offpolicy=overlap", *words)["algorithm.rollout_correction.rollout_is_threshold"] == threshold


def test_correction_none_leaves_verls_defaults():
    got = _leaves("offpolicy=overlap", "offpolicy.correction=none")
    assert [k for k in got if k.startswith(CORRECTION)] == [BYPASS] and got[BYPASS] is False  # the recipe's, off


def test_split_shares_the_devices_and_derives_the_sync_interval():
    one = resolve([TINY, "offpolicy=split", "hardware=8gpu", "hardware.rollout_engine=vllm"])
    assert one.value(f"{V1}.trainer_mode") == "separate_async"
    assert (one.value("trainer.nnodes"), one.value("trainer.n_gpus_per_node")) == (1, 4)
    assert (one.value("actor_rollout_ref.rollout.nnodes"), one.value("actor_rollout_ref.rollout.n_gpus_per_node")) == (
        1,
        4,
    )
    assert one.value("actor_rollout_ref.rollout.checkpoint_engine.backend") == "nccl"
    assert one.value(f"{V1}.separate_async.parameter_sync_step") == 1  # 8 prompts a step / mini-batches of 8
    two = resolve([
        TINY, "offpolicy=split", "hardware=2x8gpu", "hardware.rollout_engine=vllm", "offpolicy.rollout_gpus=8",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "offpolicy.max_staleness=4",
    ])  # fmt: skip
    assert (two.value("trainer.nnodes"), two.value("actor_rollout_ref.rollout.nnodes")) == (1, 1)
    assert two.value(f"{V1}.separate_async.parameter_sync_step") == 4
    assert two.value(f"{V1}.sampler.max_off_policy_threshold") == 5


def test_split_layout():
    assert split_layout(1, 8, None) == ((1, 4), (1, 4))
    assert split_layout(1, 8, 2) == ((1, 6), (1, 2))
    assert split_layout(4, 8, 16) == ((2, 8), (2, 8))
    assert split_layout(1, 1, None) == ((1, 1), (1, 0))  # refused by trainctl.checks.offpolicy
    # one cpu node: the rollout's processes come beside the training's; several: whole nodes, as on GPUs
    assert split_layout(1, 1, None, "cpu") == ((1, 1), (1, 1))
    assert split_layout(1, 2, 2, "cpu") == ((1, 2), (1, 2))
    assert split_layout(2, 1, None, "cpu") == ((1, 1), (1, 1))


def test_split_on_cpu_takes_the_gloo_engine_and_merges_lora():
    cpu = resolve([TINY, "offpolicy=split", "lora=r8"])
    engine = "actor_rollout_ref.rollout.checkpoint_engine"
    assert cpu.value(f"{engine}.backend") == "gloo"
    assert cpu.value(f"{engine}.custom_backend_module") == "trainctl.runtime.cpu_checkpoint_engine"
    assert cpu.value(f"{engine}.update_weights_bucket_megabytes") == 64
    assert (cpu.value("trainer.n_gpus_per_node"), cpu.value("actor_rollout_ref.rollout.n_gpus_per_node")) == (1, 1)
    assert cpu.value("actor_rollout_ref.model.lora.merge") is True
    off = resolve([TINY, "lora=r8"])
    assert "actor_rollout_ref.model.lora.merge" not in off.built.leaves
