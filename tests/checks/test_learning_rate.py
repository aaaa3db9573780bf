"""A learning rate far outside the usual range for a pretrained model of its size is a warning at plan time (issue 44):
the key, the value, the model's size and the usual range, with a rate inside it as the fix. The models need not be on
disk: their options give their size and width."""

from __future__ import annotations

import pytest

from trainctl.checks.learning_rate import usual_range
from trainctl.plan import make_plan


def _lr_warnings(*words: str) -> list:
    plan = make_plan(list(words), native=False, strict=False)
    return [p for p in plan.problems if p.key and p.key.endswith(("lr", "learning_rate")) and not p.is_error]


def test_the_tiny_grpo_rate_on_smollm2_is_a_warning_naming_key_value_size_and_range():
    (w,) = _lr_warnings("recipe=grpo-arith-tiny-cpu", "model=smollm2-135m")
    low, high = usual_range("rl", 576, lora=False)
    assert w.key == "actor_rollout_ref.actor.optim.lr"
    assert w.message == (
        f"actor_rollout_ref.actor.optim.lr = 0.01 is {0.01 / high:.0f} times the top of the usual range for full RL "
        f"of the policy of a 134.5M-parameter model (smollm2-135m): {low:.1g} to {high:.1g}."
    )
    assert "verl's actor default" in w.details[0] and "4096/576" in w.details[0]
    assert w.hint == "actor_rollout_ref.actor.optim.lr=7e-06"
    assert low / 10 < 7e-06 < high * 10


@pytest.mark.parametrize(
    ("words", "key"),
    [
        (["recipe=quickstart", "model=qwen2.5-7b", "optim.lr=1e-2"], "optim.lr"),  # SFT
        (["recipe=dpo-arith-tiny-cpu", "model=qwen2.5-0.5b"], "learning_rate"),  # the tiny DPO's 1e-3
        (["recipe=dpo-arith-tiny-cpu", "model=qwen2.5-7b", "learning_rate=1e-10"], "learning_rate"),  # far below
        (
            [
                "recipe=grpo-arith-tiny-cpu",
                "algorithm=ppo",
                "model=qwen2.5-7b",
                "actor_rollout_ref.actor.optim.lr=1e-6",
                "critic.optim.lr=1e-1",
            ],
            "critic.optim.lr",
        ),
    ],
)
def test_rates_far_outside_warn(words, key):
    assert [w.key for w in _lr_warnings(*words)] == [key]


@pytest.mark.parametrize(
    "words",
    [
        ["recipe=grpo-arith-tiny-cpu"],  # the tiny random model: its rates are the ones that move it
        ["recipe=grpo-arith-tiny-cpu", "model=qwen2.5-7b", "actor_rollout_ref.actor.optim.lr=1e-6"],
        ["recipe=quickstart", "model=qwen2.5-7b", "optim.lr=2e-5"],
        ["recipe=dpo-arith-tiny-cpu", "model=qwen2.5-7b", "learning_rate=5e-7"],
        # LoRA's usual rate is ten times full fine-tuning's: 2e-4 (QLoRA's) for a 7B
        ["recipe=dpo-arith-tiny-cpu", "model=qwen2.5-7b", "lora=r16", "learning_rate=5e-5"],
        ["recipe=grpo-arith-tiny-cpu", "model=smollm2-135m", "actor_rollout_ref.actor.optim.lr=0"],  # deliberate
    ],
)
def test_usual_rates_do_not_warn(words):
    assert _lr_warnings(*words) == []


def test_lora_moves_the_range_up_tenfold():
    assert usual_range("sft", 4096, lora=True) == pytest.approx(tuple(10 * x for x in usual_range("sft", 4096, False)))
