"""What a run needs from the machine it starts on: credentials, a cluster address.

Warnings on --dry-run (the plan may be for another machine); errors before a real launch.
"""

from __future__ import annotations

import netrc
import os
from typing import TYPE_CHECKING

from trainctl.errors import Problem

if TYPE_CHECKING:
    from trainctl.checks.base import Subject


def _wandb_logged_in() -> bool:
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def checks(s: Subject) -> list[Problem]:
    severity = "error" if s.launching else "warning"
    problems = []
    if "wandb" in s.cfg.logger.backends:
        offline = os.environ.get("WANDB_MODE", "").lower() in ("offline", "disabled", "dryrun")
        if not (offline or os.environ.get("WANDB_API_KEY") or _wandb_logged_in()):
            problems.append(
                Problem(
                    "logger=wandb has no credentials: WANDB_API_KEY is not set and `wandb login` was not run.",
                    key="logger",
                    hint="export WANDB_API_KEY=... (or run `wandb login`), or export WANDB_MODE=offline to log locally",
                    severity=severity,
                )
            )
    hw = s.cfg.hardware
    if hw.launcher != "local" and not hw.ray_address:
        example = "HEAD_IP:6379" if hw.launcher == "ray_cluster" else "http://HEAD_IP:8265"
        problems.append(
            Problem(
                f"hardware={hw.name} runs on a Ray cluster ({hw.launcher}) but no address is set.",
                key="hardware.ray_address",
                hint=f"export RAY_ADDRESS={example}, or hardware.ray_address={example}",
                severity=severity,
            )
        )
    return problems
