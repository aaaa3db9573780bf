"""Checks shared by several backends."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainctl.errors import Problem
from trainctl.facts import verl as facts
from trainctl.suggest import closest

if TYPE_CHECKING:
    from trainctl.checks.base import Subject


def nodes_text(n: int) -> str:
    return f"{n} node{'s' if n != 1 else ''}"


def micro_fix_key(s: Subject, key: str) -> str:
    """The key to change: the hardware group's when the value came from it, else the backend key itself."""
    origin = s.built.origins.get(key) or ""
    return "hardware.micro_batch_size_per_gpu" if origin.startswith("conf/mapping/") else key


def check_logger_names(s: Subject, key: str) -> list[Problem]:
    value = s.value(key)
    names = [value] if isinstance(value, str) else list(value or [])
    problems = []
    for name in names:
        if name not in facts.LOGGERS:
            guess = closest(str(name), facts.LOGGERS)
            problems.append(
                Problem(
                    f"{key} has {name!r}, which verl's tracker does not know.",
                    key=key,
                    details=[f"Did you mean '{guess[0]}'?"] if guess else [f"Known: {', '.join(facts.LOGGERS)}"],
                    hint="choose logger options: logger=wandb (or console, tensorboard, mlflow; "
                    "several: logger=[wandb,mlflow])",
                )
            )
    return problems


def check_verl_device(s: Subject, strategy_key: str, attn_key: str) -> list[Problem]:
    """On CPU verl needs FSDP2 (FSDP1 needs a GPU) and an attention kernel that runs on CPU."""
    if s.value("trainer.device") != "cpu":
        return []
    problems = []
    strategy = s.value(strategy_key)
    if strategy != "fsdp2":
        problems.append(
            Problem(
                f"{strategy_key} = {strategy}: only FSDP2 runs without a GPU.",
                key=strategy_key,
                hint="hardware.fsdp_strategy=fsdp2",
            )
        )
    attn = s.value(attn_key)
    if attn not in ("sdpa", "eager"):
        problems.append(
            Problem(
                f"{attn_key} = {attn or 'the model default (flash_attention_2)'}: it needs a GPU.",
                key=attn_key,
                hint="hardware.attn_implementation=sdpa",
            )
        )
    return problems
