"""The run folder's tool files (issue 11): <run>/tools.yaml, the tool config verl reads, written at launch from the
listings the plan's probes made (trainctl.checks.tools), and the environment the tool metrics read."""

from __future__ import annotations

from pathlib import Path

from trainctl.backends import tools as verl_tools
from trainctl.plan import Plan

# where trainctl's tool metrics (trainctl.runtime.tool_metrics) read the calls each step made
CALLS_ENV = "TRAINCTL_TOOL_CALLS"


def uses_tools(plan: Plan) -> bool:
    return plan.cfg.family == "ppo" and verl_tools.enabled(plan.cfg.tools)


def env(plan: Plan) -> dict[str, str]:
    if not uses_tools(plan):
        return {}
    return {CALLS_ENV: str(verl_tools.run_path(plan.run_dir, verl_tools.CALLS_DIR))}


def write_tool_config(plan: Plan) -> Path | None:
    """Write <run>/tools.yaml (atomically; no secret values: inline servers carry ${NAME} references, servers from
    a file name the file). The plan's probes listed the servers; a plan made without them lists them now."""
    if not uses_tools(plan):
        return None
    found = plan.subject.extra.get("tools")
    if found is None:
        from trainctl.checks.tools import probes

        plan.problems += probes(plan.subject)
        plan.raise_for_errors()
        found = plan.subject.extra["tools"]
    verl_tools.run_path(plan.run_dir, verl_tools.CALLS_DIR).mkdir(parents=True, exist_ok=True)
    path = verl_tools.run_path(plan.run_dir, verl_tools.TOOL_CONFIG)
    return verl_tools.write_tool_config(path, found["document"])
