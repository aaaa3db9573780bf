"""Checks for the TRL trainers (DPO, reward models, KTO, ORPO, CPO/SimPO): what each leaves until it runs."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from trainctl.checks.base import Number
from trainctl.config.overrides import render_value
from trainctl.errors import Problem
from trainctl.facts.trl import LOSS_TYPES, TRAINERS
from trainctl.suggest import closest

if TYPE_CHECKING:
    from trainctl.checks.base import Subject


def _trainer(s: Subject):
    return TRAINERS[s.cfg.family]


def checks(s: Subject) -> list[Problem]:
    problems = []
    trainer = _trainer(s)
    known = LOSS_TYPES.get(trainer.family, ())
    losses = s.value("loss_type") if known else None
    for loss in [losses] if isinstance(losses, str) else list(losses or []):
        if loss not in known:
            guess = closest(str(loss), known)
            default = s.built.defaults.get("loss_type")
            problems.append(
                Problem(
                    f"loss_type has {loss!r}, which TRL's {trainer.trainer.split(':')[1]} does not know.",
                    key="loss_type",
                    details=[f"Did you mean '{guess[0]}'?"] if guess else [f"Known: {', '.join(known)}"],
                    hint=f"loss_type={render_value(default)}",
                )
            )
    beta = s.value("beta")
    if trainer.beta and (not isinstance(beta, int | float) or beta <= 0):
        problems.append(
            Problem(f"beta = {beta!r}: {trainer.beta} must be a positive number.", key="beta", hint="beta=0.1")
        )
    micro = s.value("per_device_train_batch_size")
    if trainer.family == "kto" and s.value("loss_type") == "kto" and isinstance(micro, int) and micro < 2:
        # TRL raises this once the trainer is built, after the model has loaded
        problems.append(
            Problem(
                f"per_device_train_batch_size = {micro}: KTO estimates its KL term by pairing each row's prompt with "
                "another row's answer in the same micro-batch, so it needs at least 2 rows there.",
                key="per_device_train_batch_size",
                hint="hardware.micro_batch_size_per_gpu=2 (or loss_type=apo_zero_unpaired, which needs no KL estimate)",
            )
        )
    device = s.cfg.hardware.device
    if device == "cpu" and (s.value("bf16") or s.value("fp16")):
        problems.append(
            Problem(
                "bf16/fp16 training needs a GPU, but hardware.device = cpu.", key="bf16", hint="bf16=false fp16=false"
            )
        )
    if device == "cpu" and not s.value("use_cpu"):
        problems.append(Problem("hardware.device = cpu but use_cpu = false.", key="use_cpu", hint="use_cpu=true"))
    L = s.value("max_length")
    ctx = s.cfg.model.context_length
    if isinstance(L, int) and ctx < L:
        problems.append(
            Problem(
                f"{trainer.title}'s {trainer.row} may be longer than the model's context:",
                key="max_length",
                details=[f"max_length = {L} > {ctx} (model.context_length of model={s.cfg.model.name})"],
                hint=f"max_length={ctx}",
            )
        )
    for key in ("per_device_train_batch_size", "gradient_accumulation_steps"):
        v = s.value(key)
        if not isinstance(v, int) or v < 1:
            problems.append(Problem(f"{key} must be a positive integer, not {v!r}.", key=key))
    if s.value("use_peft") and not isinstance(s.value("lora_r"), int):
        problems.append(Problem("use_peft is on but lora_r is not an integer.", key="lora_r", hint="lora_r=16"))
    rows = s.rows("train")
    per_step = _per_step(s)
    if rows is not None and per_step and rows < per_step:
        problems.append(
            Problem(
                f"The training file has {rows} {trainer.row}, fewer than one optimizer step takes ({per_step}).",
                key="gradient_accumulation_steps",
                severity="warning",
                hint="lower gradient_accumulation_steps or hardware.micro_batch_size_per_gpu",
            )
        )
    return problems


def _world(s: Subject) -> int:
    return s.cfg.hardware.nnodes * s.cfg.hardware.gpus_per_node


def _per_step(s: Subject) -> int | None:
    b, g = s.value("per_device_train_batch_size"), s.value("gradient_accumulation_steps")
    if not isinstance(b, int) or not isinstance(g, int):
        return None
    return b * g * _world(s)


def numbers(s: Subject) -> list[Number]:
    b, g, world = s.value("per_device_train_batch_size"), s.value("gradient_accumulation_steps"), _world(s)
    unit = _trainer(s).row
    out = [
        Number(
            f"{unit} per optimizer step",
            b * g * world,
            f"per_device_train_batch_size {b} x accumulation {g} x {world} ranks",
        ),
        Number("data-parallel ranks", world, "hardware.nnodes x hardware.gpus_per_node"),
        Number("micro-batch per GPU", b, "per_device_train_batch_size"),
        Number("gradient accumulation steps", g, "gradient_accumulation_steps"),
    ]
    rows = s.rows("train")
    if rows is not None:
        steps = max(1, math.ceil(rows / (b * world)) // g)
        epochs = s.value("num_train_epochs")
        max_steps = s.value("max_steps")
        total = max_steps if isinstance(max_steps, int) and max_steps > 0 else math.ceil(steps * epochs)
        out.append(Number("steps per epoch", steps, f"ceil({rows} {unit} / ({b} x {world})) // {g}"))
        out.append(
            Number("total steps", total, "max_steps" if max_steps and max_steps > 0 else f"{steps} x {epochs} epochs")
        )
    return out
