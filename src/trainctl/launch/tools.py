"""The run folder's tool files (issue 11): <run>/tools.yaml, the tool config verl reads, written at launch from the
listings the plan's probes made (trainctl.checks.tools), and the environment the tool metrics read; before a launch
(issue 30), the tokenization preflight (trainctl.toolenv.preflight) and the tool environment's record in lock.json
(trainctl.toolenv.identity), compared with the run's own when it resumes."""

from __future__ import annotations

from pathlib import Path

from trainctl.backends import tools as verl_tools
from trainctl.plan import Plan

# where trainctl's tool metrics (trainctl.runtime.tool_metrics) read the calls each step made
CALLS_ENV = "TRAINCTL_TOOL_CALLS"
# set for a run whose tools include MCP servers: its fork server preloads the MCP SDK for the agent-loop workers
# (trainctl.runtime.forkserver.stage_two)
MCP_ENV = "TRAINCTL_MCP_SERVERS"


def uses_tools(plan: Plan) -> bool:
    return plan.cfg.family == "ppo" and verl_tools.enabled(plan.cfg.tools)


def env(plan: Plan) -> dict[str, str]:
    if not uses_tools(plan):
        return {}
    from trainctl.runtime.trajectories import ENV_ROLLOUTS

    t = plan.cfg.tools
    return {
        CALLS_ENV: str(verl_tools.run_path(plan.run_dir, verl_tools.CALLS_DIR)),
        # where the tool loop records each trajectory's turns (trainctl.runtime.trajectories)
        ENV_ROLLOUTS: str(verl_tools.run_path(plan.run_dir, verl_tools.ROLLOUTS_DIR)),
        **({MCP_ENV: "1"} if t.servers or t.servers_file else {}),
    }


def _listed(plan: Plan) -> dict:
    """The plan's probes' findings (listing the servers now when the plan was made without them)."""
    found = plan.subject.extra.get("tools")
    if found is None:
        from trainctl.checks.tools import probes

        plan.problems += probes(plan.subject)
        plan.raise_for_errors()
        found = plan.subject.extra["tools"]
    return found


def before_launch(plan: Plan, run_dir: Path, resume: bool) -> list[str]:
    """What a run with tools does before anything starts: the tokenization preflight (raises ConfigProblems naming
    the first token that differs, and its turn), and the tool environment recorded for lock.json. Returns notes:
    how the servers differ from those the run was trained with, when it resumes."""
    if not uses_tools(plan):
        return []
    from trainctl.errors import ConfigProblems
    from trainctl.toolenv import identity, preflight

    found = _listed(plan)
    kwargs = plan.value("data.apply_chat_template_kwargs")
    before = set(Path(run_dir).rglob("*"))
    try:
        _, problems = preflight.run(plan.cfg, found["document"], dict(kwargs) if kwargs else None)
    finally:
        if not (Path(run_dir) / "run.json").exists():
            # what the preflight's servers wrote into a run folder not started yet (the calculator's --log)
            for path in sorted(set(Path(run_dir).rglob("*")) - before, key=lambda p: len(p.parts), reverse=True):
                if path.is_dir():
                    path.rmdir() if not any(path.iterdir()) else None
                else:
                    path.unlink(missing_ok=True)
    if problems:
        raise ConfigProblems(problems)
    found["environment"] = identity.environment(
        found.get("servers") or {}, found.get("functions"), run_dir=plan.run_dir
    )
    if not resume:
        return []
    changed = identity.changes(identity.saved(run_dir), found["environment"])
    if not changed:
        return []
    return ["the tool servers differ from those the run was trained with: " + "; ".join(changed)]


def write_tool_config(plan: Plan) -> Path | None:
    """Write <run>/tools.yaml (atomically; no secret values: inline servers carry ${NAME} references, servers from
    a file name the file). The plan's probes listed the servers; a plan made without them lists them now."""
    if not uses_tools(plan):
        return None
    found = _listed(plan)
    verl_tools.run_path(plan.run_dir, verl_tools.CALLS_DIR).mkdir(parents=True, exist_ok=True)
    if "environment" in found:
        _record_environment(Path(plan.run_dir), found["environment"])
    path = verl_tools.run_path(plan.run_dir, verl_tools.TOOL_CONFIG)
    return verl_tools.write_tool_config(path, found["document"])


def _record_environment(run_dir: Path, environment: dict) -> None:
    """Add the tool environment to the lock.json the run folder just got (trainctl.launch.rundir.write_config)."""
    import json

    from trainctl.paths import atomic_write_text
    from trainctl.toolenv.identity import LOCK_KEY

    lock = run_dir.expanduser() / "lock.json"
    data = json.loads(lock.read_text()) if lock.is_file() else {}
    data[LOCK_KEY] = environment
    atomic_write_text(lock, json.dumps(data, indent=2) + "\n")


JOB_TOOL_CONFIG = "tools-job.yaml"  # in the run folder: the tool config a Ray job carries (as tools.yaml there)


def job_parts(plan: Plan, job_config_dir: str) -> tuple[dict[str, Path], list[str]]:
    """What a Ray job with tools carries: the files staged in its working dir (name -> file here: the job's
    tools.yaml, kept in the run folder as tools-job.yaml, and the server and function files it names), and the
    overrides its entrypoint adds (the tool config in the working dir, `job_config_dir` standing for it)."""
    if not uses_tools(plan):
        return {}, []
    from trainctl.backends.base import JOB_PYTHON

    document, staged = verl_tools.job_document(_listed(plan)["document"], JOB_PYTHON)
    path = verl_tools.write_tool_config(verl_tools.run_path(plan.run_dir, JOB_TOOL_CONFIG), document)
    staged = {verl_tools.TOOL_CONFIG: path, **staged}
    key = "actor_rollout_ref.rollout.multi_turn.tool_config_path"
    return staged, [f"{key}={job_config_dir}/{verl_tools.TOOL_CONFIG}"]
