"""What a run needs from the machine it starts on: credentials, a cluster address.

Warnings on --dry-run (the plan may be for another machine); errors before a real launch.
"""

from __future__ import annotations

import netrc
import os
from typing import TYPE_CHECKING

from trainctl import launchers
from trainctl.errors import Problem

if TYPE_CHECKING:
    from trainctl.checks.base import Subject
    from trainctl.config.schema import Config


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
    launcher = launchers.get(s.cfg.hardware.launcher)
    problems += launcher.config_problems(s.cfg.hardware, s.launching)
    if launcher.ray == "inside":
        problems += _forwarded(s.cfg)
    return problems


def job_secrets(cfg: Config) -> dict[str, str]:
    """The secrets a run reads (name -> what reads it): a Ray job finds them in the cluster nodes' environment."""
    from trainctl.secrets import is_secret_name

    out: dict[str, str] = {}
    for name in cfg.logger.env:
        if is_secret_name(name):
            out[name] = f"logger={cfg.logger.name}"
    if cfg.family == "ppo":
        from trainctl.backends.rewards import kind_of

        out.update(kind_of(cfg).secret_env(cfg))
    for server, spec in (cfg.tools.servers or {}).items() if cfg.family == "ppo" else ():
        for name in spec.env:
            out.setdefault(name, f"MCP server {server}")
    if os.environ.get("HF_TOKEN"):
        out.setdefault("HF_TOKEN", "the hub (set here)")
    return out


def _forwarded(cfg: Config) -> list[Problem]:
    names = list(cfg.hardware.forward_secrets)
    if not names:
        return []
    return [
        Problem(
            f"hardware.forward_secrets={names}: the job's runtime_env will carry {', '.join(names)}, and Ray's Jobs "
            "API shows a job's runtime_env to every holder of the cluster's token (on its dashboard and in "
            "GET /api/jobs/), and keeps it in the job table after the run.",
            key="hardware.forward_secrets",
            hint="set them in the cluster nodes' environment instead (before `ray start`), and drop "
            "hardware.forward_secrets; `trainctl doctor hardware=...` checks that the nodes have them",
            severity="warning",
        )
    ]
