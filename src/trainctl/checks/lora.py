"""Checks of the `lora` group (trainctl.config.schema.Lora) against the algorithm, the model and the machine.

Rank, alpha and dropout ranges are the schema's (bounds on the fields). Here: what the backend cannot do with a
setting (verl 0.9.1 has no 4-bit base and no LoRA dropout), QLoRA's needs (a CUDA GPU and bitsandbytes), target
modules the model does not have, and the backends' own LoRA keys set by hand, which the lora group now owns.
"""

from __future__ import annotations

import importlib.util
import re
from typing import TYPE_CHECKING, Any

from trainctl.config.origins import COMMAND_LINE
from trainctl.config.overrides import render_value
from trainctl.errors import Problem
from trainctl.suggest import closest

if TYPE_CHECKING:
    from trainctl.checks.base import Subject

# Each backend's LoRA keys that the lora group sets: key -> the lora setting that replaces it ({v}: the value)
OWNED_KEYS: dict[str, dict[str, str]] = {
    "verl-sft": {
        "model.lora_rank": "lora.rank={v}",
        "model.lora_alpha": "lora.alpha={v}",
        "model.target_modules": "lora.target_modules={v}",
    },
    "verl-ppo": {
        "actor_rollout_ref.model.lora_rank": "lora.rank={v}",
        "actor_rollout_ref.model.lora_alpha": "lora.alpha={v}",
        "actor_rollout_ref.model.target_modules": "lora.target_modules={v}",
    },
    "trl": {  # every TRL trainer (trl-dpo, trl-rm, ...)
        "use_peft": "lora=r16",
        "lora_r": "lora.rank={v}",
        "lora_alpha": "lora.alpha={v}",
        "lora_dropout": "lora.dropout={v}",
        "lora_target_modules": "lora.target_modules={v}",
        "load_in_4bit": "lora.quantize=4bit",
    },
}


def checks(s: Subject) -> list[Problem]:
    problems = _owned_keys(s)
    lora = s.cfg.lora
    if not lora.enabled:
        if lora.quantize != "none":
            problems.append(
                Problem(
                    f"lora.quantize = {lora.quantize} but LoRA is off (lora={lora.name}, lora.rank = null): a 4-bit "
                    "base needs adapters to train.",
                    key="lora.quantize",
                    hint="lora=qlora-r16, or lora.quantize=none",
                )
            )
        return problems
    verl = s.cfg.family in ("sft", "ppo")
    if verl and lora.quantize != "none":
        problems.append(
            Problem(
                f"lora.quantize = {lora.quantize} (QLoRA) with algorithm={s.cfg.algorithm.name}: verl 0.9.1 cannot "
                "train on a 4-bit base (its FSDP engine loads the model in full precision and has no quantization "
                "setting).",
                key="lora.quantize",
                details=[
                    "QLoRA runs with the TRL algorithms (dpo, rm, kto, orpo, simpo); SFT and the PPO family take "
                    "LoRA on a bf16 base"
                ],
                hint=f"lora=r{lora.rank} (LoRA on the full-precision base), or algorithm=dpo",
            )
        )
    if verl and lora.dropout > 0:
        problems.append(
            Problem(
                f"lora.dropout = {lora.dropout} with algorithm={s.cfg.algorithm.name}: verl 0.9.1's LoRA has no "
                "dropout (its FSDP engine builds the adapters without one).",
                key="lora.dropout",
                hint="lora.dropout=0",
            )
        )
    if lora.quantize == "4bit":
        problems += _qlora_machine(s)
    problems += _targets(s)
    problems += _verl_combinations(s)
    return problems


def _owned_keys(s: Subject) -> list[Problem]:
    """A backend LoRA key set by hand (the old DPO spelling, verl's own keys) is refused: one way to say it."""
    owned = OWNED_KEYS.get(s.backend, OWNED_KEYS["trl"] if s.comp.node == "trl" else {})
    mapping = f"conf/mapping/{'trl' if s.comp.node == 'trl' else s.backend.replace('-', '_')}.yaml"
    out = []
    for key, new in owned.items():
        if key not in s.built.leaves or s.built.origins.get(key) == mapping:
            continue
        value = s.built.leaves[key]
        where = s.built.origins.get(key) or s.comp.origin(f"{s.comp.node}.{key}")
        where = None if where == COMMAND_LINE else where
        fix = new.format(v=render_value(_plain(value)))
        if key == "use_peft" and not value:
            fix = "lora=none (the default)"
        out.append(
            Problem(
                f"{key} is set by the lora group now" + (f" (set in {where})" if where else "") + ".",
                key=key,
                details=["trainctl's lora group says LoRA once for every algorithm (`trainctl config groups`)"],
                hint=f"{fix}, and drop {key}",
            )
        )
    return out


def _plain(value: Any) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def _qlora_machine(s: Subject) -> list[Problem]:
    hw = s.cfg.hardware
    if hw.device != "cuda":
        return [
            Problem(
                f"lora.quantize = 4bit (QLoRA) on hardware={hw.name}: bitsandbytes' 4-bit NF4 layers need a CUDA GPU.",
                key="lora.quantize",
                hint=f"lora=r{s.cfg.lora.rank} (LoRA without the 4-bit base) on cpu, or a GPU: hardware=1gpu",
            )
        ]
    if not bitsandbytes_installed():
        # a dry run may plan for another machine: only a launch here needs the package here
        return [
            Problem(
                "lora.quantize = 4bit (QLoRA) loads the base with bitsandbytes, which is not installed"
                + (" here." if s.launching else " on this machine (the machine that trains needs it)."),
                key="lora.quantize",
                hint="pip install bitsandbytes",
                severity="error" if s.launching else "warning",
            )
        ]
    return []


def bitsandbytes_installed() -> bool:
    return importlib.util.find_spec("bitsandbytes") is not None


def _targets(s: Subject) -> list[Problem]:
    """Named target modules must be layers of the model's architecture (read from it: trainctl.models.modules)."""
    lora = s.cfg.lora
    targets = lora.target_modules
    if targets == "all-linear" or targets == ["all-linear"]:
        return []
    from trainctl.models.modules import model_modules

    arch = s.cfg.model.arch.type if s.cfg.model.arch else None
    try:
        found = model_modules(s.cfg.model.path, arch)
    except Exception as e:  # an architecture transformers cannot build here: the run will say, not this check
        return [
            Problem(
                f"lora.target_modules could not be checked against model={s.cfg.model.name}: {e}",
                key="lora.target_modules",
                severity="warning",
            )
        ]
    if found is None:
        return []
    known = found.names
    where = f"{found.architecture} (model={s.cfg.model.name})"
    if isinstance(targets, str):
        # PEFT reads a string other than all-linear as a regular expression over full module names
        sample = [f"model.layers.0.self_attn.{n}" for n in found.linear]
        if any(re.fullmatch(targets, n) for n in sample) or targets in known:
            return []
        return [
            Problem(
                f"lora.target_modules = {targets!r} matches no layer of {where}.",
                key="lora.target_modules",
                details=[f"its linear layers: {', '.join(found.linear)}"],
                hint=f"lora.target_modules=[{','.join(found.linear[:2])}], or lora.target_modules=all-linear",
            )
        ]
    unknown = [t for t in targets if t not in known]
    if not unknown:
        return []
    details = []
    for t in unknown:
        guess = closest(t, known)
        details.append(f"{t!r}: did you mean '{guess[0]}'?" if guess else f"{t!r}: no such layer")
    details.append(f"its linear layers: {', '.join(found.linear)}")
    fixed = [(closest(t, known) or [None])[0] if t in unknown else t for t in targets]
    fixed = [t for t in fixed if t]
    hint = f"lora.target_modules=[{','.join(fixed)}]" if fixed else "lora.target_modules=all-linear"
    return [
        Problem(
            f"lora.target_modules names {len(unknown)} layer{'s' if len(unknown) > 1 else ''} that {where} does not "
            "have.",
            key="lora.target_modules",
            details=details,
            hint=hint,
        )
    ]


def _verl_combinations(s: Subject) -> list[Problem]:
    """LoRA settings verl 0.9.1 accepts at start-up but fails on later, inside its workers."""
    if s.backend != "verl-ppo":
        return []
    AR = "actor_rollout_ref"
    load_format = str(s.value(f"{AR}.rollout.load_format") or "")
    if s.value(f"{AR}.rollout.layered_summon") and "dummy" in load_format and not s.value(f"{AR}.model.lora.merge"):
        # fsdp_utils.collect_lora_params raises on the first weight sync
        return [
            Problem(
                f"{AR}.rollout.layered_summon = true with LoRA needs the rollout to load the base model itself, but "
                f"{AR}.rollout.load_format = {load_format} (verl 0.9.1 fails at the first weight sync).",
                key=f"{AR}.rollout.load_format",
                hint=f"{AR}.rollout.load_format=safetensors, or {AR}.rollout.layered_summon=false",
            )
        ]
    return []
