"""Printing plans and configs."""

from __future__ import annotations

from typing import Any

import yaml

from trainctl.backends.verl import shell_line
from trainctl.plan import Plan


def plan_text(plan: Plan, title: str | None = None) -> str:
    cfg = plan.cfg
    hw = cfg.hardware
    devices = "process" if hw.device == "cpu" else "GPU"
    lines = []
    if title:
        lines += [title, ""]
    lines.append(
        f"Plan: {cfg.algorithm.name} on model={cfg.model.name} with {_prompts(cfg)}, "
        f"hardware={hw.name} ({_count(hw.nnodes, 'node')} x {_count(hw.gpus_per_node, devices)}, "
        f"{hw.launcher}), loggers: {', '.join(plan.loggers())}"
    )
    lines.append(f"Backend: {plan.backend.title}; run folder: {plan.run_dir}")
    if plan.lineage is not None:
        lines.append(f"Model from: {plan.lineage.describe()}; merged (verified) into {plan.lineage.merged}")
    from trainctl.ckpt.lineage import OTHER_MODELS

    for other in OTHER_MODELS:
        if other.key in plan.other_lineages:
            lineage = plan.other_lineages[other.key]
            lines.append(f"{other.label}: {lineage.describe()}; read from {lineage.merged}")
    lines.append("")
    lines.append("Config (trainctl config show):")
    lines += ["  " + ln for ln in plan.trainctl_yaml().rstrip().splitlines()]
    lines.append("")
    built = plan.built
    lines.append(
        f"Backend keys trainctl sets ({len(built.leaves)}; the full config: trainctl config show --backend ...):"
    )
    lines += ["  " + o for o in plan.built.raw_overrides()]
    lines.append("")
    from trainctl.launch.runner import full_command

    cmd = full_command(plan)
    lines.append(f"Launch ({cmd.launcher}):")
    lines.append("  " + shell_line(cmd.argv, cmd.env))
    lines.append(f"  (the backend config is written to {plan.run_dir / plan.backend.config_file} when the run starts)")
    lines.append("")
    lines += _job_secrets(plan)
    if plan.numbers:
        lines.append("Numbers:")
        width = max(len(n.label) for n in plan.numbers)
        for n in plan.numbers:
            lines.append(f"  {n.label:<{width}}  {n.value!s:<10}  {n.how}")
        lines.append("")
    return "\n".join(lines)


def _job_secrets(plan: Plan) -> list[str]:
    """Where a Ray job's secrets come from (none travel with the job unless forwarded)."""
    from trainctl import launchers
    from trainctl.checks.environment import job_secrets

    hw = plan.cfg.hardware
    if launchers.get(hw.launcher).ray != "inside":
        return []
    forwarded = list(hw.forward_secrets)
    read = [f"{k} ({why})" for k, why in job_secrets(plan.cfg).items() if k not in forwarded]
    lines = ["Secrets (Ray shows a job's runtime_env to every holder of the cluster's token):"]
    lines.append("  read from the cluster nodes' environment: " + (", ".join(read) or "none needed"))
    if forwarded:
        lines.append("  forwarded in the job's runtime_env (hardware.forward_secrets): " + ", ".join(forwarded))
    return [*lines, ""]


def _count(n: int, noun: str) -> str:
    plural = "es" if noun.endswith("s") else "s"
    return f"{n} {noun}{plural if n != 1 else ''}"


def _scalar(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10**9).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def yaml_with_origins(tree: dict, origin, prefix: str = "", indent: int = 0) -> list[str]:
    """YAML of a nested dict with `# origin` after every leaf; origin(path) gives the label."""
    lines = []
    pad = "  " * indent
    for key, value in tree.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        name = _scalar(key) if not isinstance(key, str) or key in ("n", "y", "yes", "no", "on", "off") else key
        if isinstance(value, dict) and value:
            lines.append(f"{pad}{name}:")
            lines += yaml_with_origins(value, origin, path, indent + 1)
        else:
            lines.append(f"{pad}{name}: {_scalar(value)}  # {origin(path)}")
    return lines


def _prompts(cfg) -> str:
    """Where the run's prompts come from: the data option, or the environment and its tasks."""
    if cfg.env.kind == "none":
        return f"data={cfg.data.name}"
    if cfg.env.kind == "verifiers":
        return f"env={cfg.env.name} ({cfg.env.id})"
    names = [t if isinstance(t, str) else t.get("name") for t in cfg.env.tasks]
    return f"env={cfg.env.name} ({', '.join(map(str, names))})" if names else f"env={cfg.env.name}"
