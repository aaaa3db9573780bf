"""A learning rate far outside the usual range for a pretrained model of that size, for what is trained (full or
LoRA): a warning at plan time naming the key, the value, the model's size and the usual range.

Learned the hard way (issue 44): the tiny recipes' rates (1e-2 for GRPO: right for a random 181k-parameter model)
took SmolLM2-135M-Instruct to KL 1.3 and entropy 1e-4 in one step, and `config validate` called that valid.

The usual ranges are those of full fine-tuning at about 7B parameters (width 4096), from the defaults of the
libraries trainctl runs and the published recipes they follow:

  sft         1e-6 .. 5e-5   verl's SFT default 1e-5; TRL's SFTConfig 2e-5; Alpaca, Tulu 2 and Zephyr's SFT 2e-5
  preference  1e-7 .. 5e-6   TRL's DPO, KTO, ORPO and CPO (SimPO) configs 1e-6; Zephyr's and Tulu 2's DPO 5e-7
  reward      1e-6 .. 1e-4   InstructGPT's 6B reward model 9e-6; TRL's RewardConfig 1e-4
  rl          1e-7 .. 1e-5   verl's actor default 1e-6 and its GSM8K GRPO/PPO examples 1e-6; TRL's GRPOConfig 1e-6,
                             its PPOConfig 3e-6
  critic      1e-6 .. 1e-4   verl's critic default 1e-5

LoRA trains a small update at about ten times the full rate (QLoRA's 2e-4 at 7-13B against 2e-5 for full SFT): its
ranges are ten times these. Adam's best rate falls about as 1/width (muP), so the range moves by 4096/hidden_size:
x7.1 for SmolLM2-135M (576 wide), x0.5 for a 72B (8192). Only far outside (10x beyond either end) warns: the ranges
are wide and recipes differ. Models under 10M parameters are skipped: trainctl's tiny ones are random, and learn only
at rates no pretrained model survives (the tiny recipes' 1e-3 to 1e-2).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from trainctl.errors import Problem

if TYPE_CHECKING:
    from trainctl.checks.base import Subject


@dataclass(frozen=True)
class Usual:
    low: float
    high: float
    what: str  # what is trained, in words
    source: str


# full fine-tuning at REFERENCE_WIDTH
USUAL = {
    "sft": Usual(
        1e-6, 5e-5, "SFT", "verl's SFT default 1e-5, TRL's SFTConfig 2e-5, Alpaca's, Tulu 2's and Zephyr's 2e-5"
    ),
    "preference": Usual(
        1e-7, 5e-6, "preference tuning", "TRL's DPO, KTO, ORPO and CPO configs 1e-6, Zephyr's and Tulu 2's DPO 5e-7"
    ),
    "reward": Usual(1e-6, 1e-4, "reward-model training", "InstructGPT's reward model 9e-6, TRL's RewardConfig 1e-4"),
    "rl": Usual(
        1e-7, 1e-5, "RL of the policy", "verl's actor default and GSM8K examples 1e-6, TRL's GRPOConfig 1e-6, PPO 3e-6"
    ),
    "critic": Usual(1e-6, 1e-4, "the critic", "verl's critic default 1e-5"),
}
REFERENCE_WIDTH = 4096  # the ranges are for a 7B (Llama 2 7B, Qwen2.5 7B: hidden 3584-4096)
LORA_FACTOR = 10
FAR = 10  # how far beyond an end of the range warns
PRETRAINED_FROM = 10_000_000  # parameters: below this a model is a toy (trainctl's tiny ones are random)


@dataclass(frozen=True)
class Rate:
    key: str
    value: float
    kind: str  # a key of USUAL


def _rates(s: Subject) -> list[Rate]:
    def rate(key: str, kind: str) -> Rate | None:
        value = s.value(key)
        return Rate(key, float(value), kind) if isinstance(value, (int, float)) else None

    if s.backend == "verl-sft":
        found = [rate("optim.lr", "sft")]
    elif s.backend == "verl-ppo":
        found = [rate("actor_rollout_ref.actor.optim.lr", "rl")]
        if s.value("algorithm.adv_estimator") == "gae":
            found.append(rate("critic.optim.lr", "critic"))
    else:
        kind = "reward" if s.cfg.family == "rm" else "preference"
        found = [rate("learning_rate", kind)]
    return [r for r in found if r is not None]


def _model(s: Subject) -> tuple[int, int] | None:
    """The model's parameters and width, from its folder (or its option before it is pulled)."""
    from trainctl.models.catalog import ModelError
    from trainctl.models.info import from_folder, from_option

    model = s.cfg.model
    folder = Path(model.path).expanduser()
    try:
        info = from_folder(model.name, folder) if (folder / "config.json").is_file() else from_option(model.name, model)
    except (ModelError, KeyError, ValueError, OSError, TypeError, AttributeError):
        return None
    return (info.params, info.hidden_size) if info.params and info.hidden_size else None


def usual_range(kind: str, hidden_size: int, lora: bool) -> tuple[float, float]:
    u = USUAL[kind]
    scale = REFERENCE_WIDTH / hidden_size * (LORA_FACTOR if lora else 1)
    return u.low * scale, u.high * scale


def _size(params: int) -> str:
    return f"{params / 1e9:.3g}B" if params >= 1e9 else f"{params / 1e6:.4g}M"


def checks(s: Subject) -> list[Problem]:
    rates = [r for r in _rates(s) if r.value > 0]  # 0: deliberately not training
    if not rates:
        return []
    found = _model(s)
    if found is None or found[0] < PRETRAINED_FROM:
        return []
    params, width = found
    lora = s.cfg.lora.enabled
    problems = []
    for r in rates:
        low, high = usual_range(r.kind, width, lora)
        if low / FAR <= r.value <= high * FAR:
            continue
        u = USUAL[r.kind]
        how = f"{'LoRA' if lora else 'full'} {u.what}"
        far = f"{r.value / high:.0f} times the top" if r.value > high else f"1/{low / r.value:.0f} of the bottom"
        middle = _round((low * high) ** 0.5)
        problems.append(
            Problem(
                f"{r.key} = {r.value:g} is {far} of the usual range for {how} of a {_size(params)}-parameter model "
                f"({s.cfg.model.name}): {low:.1g} to {high:.1g}.",
                key=r.key,
                details=[
                    f"the usual range: {u.low:g} to {u.high:g} at 7B ({u.source}), x{LORA_FACTOR} for LoRA, "
                    f"scaled by {REFERENCE_WIDTH}/{width} for this model's width (muP: Adam's best rate falls as "
                    "1/width)",
                    "too high destroys a pretrained model within a step or two (its entropy collapses); too low "
                    "leaves it where it was",
                ],
                hint=f"{r.key}={middle:g}",
                severity="warning",
            )
        )
    return problems


def _round(x: float) -> float:
    """One significant figure: 7.1e-06 -> 7e-06."""
    return float(f"{x:.0e}")
