"""Running a plan: preflight, the run folder, the launcher, the outcome.

Everything that can fail because of the user's config, data, model or machine fails here, before a process
starts (preflight); the trainer's own failures come back with its exit code and the tail of its log.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from trainctl.backends.base import JOB_CONFIG_DIR, Command
from trainctl.errors import EXIT_INTERRUPTED, EXIT_RUN_FAILED, ConfigProblems, Problem, TrainctlError
from trainctl.launch import ray_jobs, tools
from trainctl.launch.process import Supervisor
from trainctl.launch.rundir import RunDir, relative
from trainctl.plan import Plan

# an exception line, possibly prefixed by torchrun's "[rank0]: " or Ray's "(TrainingWorker pid=1) "
_EXCEPTION = re.compile(
    r"^\s*(?:\[rank\d+\]:\s*|\(\w+ pid=\d+\)\s*)?"  # the launcher's prefix
    r"(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Interrupt)\b(?::.*)?$"
)
# launcher wrappers whose summaries hide the trainer's own exception
_WRAPPERS = ("ChildFailedError", "torch.distributed.elastic", "RayTaskError", "ActorDiedError")


def failure_excerpt(lines: list[str], keep: int = 20) -> list[str]:
    """The lines that explain a failure: the traceback ending at the trainer's last exception, not torchrun's."""
    hits = [i for i, line in enumerate(lines) if _EXCEPTION.match(line) and not any(w in line for w in _WRAPPERS)]
    if not hits:
        return lines[-keep:]
    end = hits[-1]
    return lines[max(0, end - keep + 1) : end + 1]


@dataclass
class RunResult:
    run_dir: Path
    state: str  # finished | failed | interrupted | submitted
    exit_code: int
    seconds: float = 0.0
    job_id: str | None = None
    tail: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def launch_env(plan: Plan, attempt: int | None = None) -> dict[str, str]:
    """The environment a run adds for its trainer (on top of the user's): platform, loggers, paths."""
    run = plan.run_dir
    # TRAINCTL_LAUNCHED: trainctl's verl plugin acts only in processes trainctl started (runtime/verl_cpu_plugin.py)
    env: dict[str, str] = {"PYTHONUNBUFFERED": "1", "HYDRA_FULL_ERROR": "1", "TRAINCTL_LAUNCHED": "1"}
    hw = plan.cfg.hardware
    if hw.device == "cpu" and plan.backend.node == "verl":
        env["VERL_PLATFORM"] = "cpu"  # trainctl's verl plugin (trainctl.runtime.verl_cpu_plugin)
    if plan.cfg.family == "ppo":
        env["TRAINCTL_REWARD_KIND"] = plan.cfg.reward.kind  # reward metrics (trainctl.runtime.reward_metrics)
    env.update(tools.env(plan))  # tool metrics (trainctl.runtime.tool_metrics), issue 11
    metrics = run / "metrics" / (f"attempt-{attempt}.jsonl" if attempt else "attempt-N.jsonl")
    env["VERL_FILE_LOGGER_PATH"] = str(metrics)
    env["TRAINCTL_METRICS_PATH"] = str(metrics)
    # every logger writes inside the run folder: the trainers' defaults are relative to the working directory
    # (verl: tensorboard_log/, TRL: checkpoints/runs/, MLflow: ./mlruns or /tmp/mlruns.db)
    backends = plan.cfg.logger.backends
    if "tensorboard" in backends:
        env["TENSORBOARD_DIR"] = str(run / "tensorboard")  # verl
        env["TENSORBOARD_LOGGING_DIR"] = str(run / "tensorboard")  # transformers' TensorBoardCallback (TRL)
    if "wandb" in backends:
        env["WANDB_DIR"] = str(run)
        env.setdefault("WANDB_PROJECT", str(plan.cfg.run.project))
    if "mlflow" in backends:
        env.setdefault("MLFLOW_EXPERIMENT_NAME", str(plan.cfg.run.project))
        if not os.environ.get("MLFLOW_TRACKING_URI"):
            env["MLFLOW_TRACKING_URI"] = f"sqlite:///{run / 'mlflow.db'}"
    if plan.backend.node == "trl" and hw.launcher != "local":
        # Ray Train sizes itself from this (trainctl.runtime.trl_dpo_entry --ray)
        env["TRAINCTL_HARDWARE"] = json.dumps({k: getattr(hw, k) for k in ("nnodes", "gpus_per_node", "device")})
    return env


def full_command(plan: Plan, attempt: int | None = None) -> Command:
    """The plan's command (built once, with the plan) with the run's environment added."""
    cmd = plan.command
    return dataclasses.replace(cmd, argv=list(cmd.argv), env={**launch_env(plan, attempt), **cmd.env})


# -- preflight ----------------------------------------------------------------------------------------------------


def preflight(plan: Plan) -> None:
    """What only a real launch needs from this machine: devices, launch tools, rollout engines."""
    problems: list[Problem] = []
    hw = plan.cfg.hardware
    if hw.launcher == "local" and hw.device == "cuda":
        import torch

        have = torch.cuda.device_count()
        if have < hw.gpus_per_node:
            problems.append(
                Problem(
                    f"hardware={hw.name} needs {hw.gpus_per_node} GPUs on this machine; it has {have}.",
                    key="hardware",
                    hint="run on a machine with them, choose hardware=cpu, or submit to a cluster "
                    "(hardware.launcher=ray_job hardware.ray_address=http://HEAD:8265)",
                )
            )
        engine = plan.value("actor_rollout_ref.rollout.name") if plan.cfg.family == "ppo" else None
        if engine in ("vllm", "sglang"):
            import importlib.util

            if importlib.util.find_spec(engine) is None:
                problems.append(
                    Problem(
                        f"the rollout engine {engine} is not installed here.",
                        key="hardware.rollout_engine",
                        hint="pip install 'trainctl[gpu]' (vLLM; GPU machines only)",
                    )
                )
    launcher = plan.command.argv[0]
    if hw.launcher == "local" and not (Path(launcher).is_file() or shutil.which(launcher)):
        problems.append(Problem(f"{launcher} is not there.", hint="install torch in this environment (make install)"))
    if problems:
        raise ConfigProblems(problems)


# -- resume -------------------------------------------------------------------------------------------------------


def latest_verl_step(checkpoints: Path) -> int | None:
    marker = checkpoints / "latest_checkpointed_iteration.txt"
    try:
        return int(marker.read_text().strip())
    except (OSError, ValueError):
        return None


def sft_steps_per_epoch(plan: Plan) -> int | None:
    """What verl's SFT dataloader yields per epoch: DistributedSampler and batches both drop the remainder."""
    rows = plan.rows("train")
    if rows is None:
        return None
    limit = plan.value("data.train_max_samples")
    if isinstance(limit, int) and limit > 0:
        rows = min(rows, limit)
    nodes, per_node = plan.value("trainer.nnodes"), plan.value("trainer.n_gpus_per_node")
    dp = max(1, nodes * per_node // (plan.value("engine.ulysses_sequence_parallel_size") or 1))
    per_rank_batch = plan.value("data.train_batch_size") // dp
    return (rows // dp) // per_rank_batch if per_rank_batch else None


def expected_steps(plan: Plan) -> int | None:
    """The optimizer steps the run will take, as the trainer counts them (the live view's total; the trainer's own
    "Total steps: N" line, where it prints one, corrects it). None when the data's size is unknown."""
    family = plan.cfg.algorithm.family
    if family == "sft":
        per_epoch = sft_steps_per_epoch(plan)
        limit = plan.value("trainer.total_training_steps")
        return limit or (per_epoch * plan.value("trainer.total_epochs") if per_epoch else None)
    rows = plan.rows("train")
    if family == "ppo":
        limit = plan.value("trainer.total_training_steps")
        if limit:
            return limit
        if rows is None:
            return None
        most = plan.value("data.train_max_samples")
        rows = min(rows, most) if isinstance(most, int) and most > 0 else rows
        batch = plan.value("data.gen_batch_size") or plan.value("data.train_batch_size")
        return rows // batch * plan.value("trainer.total_epochs") if batch else None
    if family == "dpo":
        if (plan.value("max_steps") or -1) > 0:
            return plan.value("max_steps")
        if rows is None:
            return None
        world = plan.cfg.hardware.nnodes * plan.cfg.hardware.gpus_per_node
        batches = math.ceil(rows / (plan.value("per_device_train_batch_size") * world))
        per_epoch = math.ceil(batches / (plan.value("gradient_accumulation_steps") or 1))
        return math.ceil(per_epoch * plan.value("num_train_epochs"))
    return None


def prepare_sft_resume(plan: Plan) -> tuple[str | None, bool]:
    """Make verl's SFT resume train what it should. Returns (note, already finished).

    verl 0.9.1 saves the dataloader's iterator with the checkpoint. Saved at the end of an epoch, that iterator is
    exhausted; on resume verl moves to the next epoch, iterates the restored (exhausted) loader, finds nothing,
    and silently skips that epoch (exiting 0). At an epoch boundary the saved iterator carries no information, so
    trainctl sets it aside: the next epoch then starts from its beginning, with the epoch's own shuffle.
    """
    checkpoints = Path(plan.value("trainer.default_local_dir"))
    step = latest_verl_step(checkpoints)
    per_epoch = sft_steps_per_epoch(plan)
    if step is None or not per_epoch:
        return None, False
    total = plan.value("trainer.total_training_steps") or per_epoch * plan.value("trainer.total_epochs")
    if step >= total:
        return f"the run is complete: step {step} of {total}.", True
    if step % per_epoch:
        return f"resuming at step {step} of {total} (mid-epoch: verl restores the dataloader position).", False
    moved = []
    for state in sorted((checkpoints / f"global_step_{step}").glob("data_*.pt")):
        aside = state.with_name(state.name + ".epoch-end")
        state.rename(aside)
        moved.append(aside.name)
    note = (
        f"resuming at step {step}, the end of epoch {step // per_epoch}: verl 0.9.1 would skip the next epoch "
        f"(it restores a finished dataloader), so its saved state was set aside ({', '.join(moved) or 'none'})."
    )
    return note, False


def config_changes(plan: Plan, saved: Path) -> list[str]:
    """Backend keys whose value differs from the saved config of the run being resumed."""
    from omegaconf import OmegaConf

    from trainctl.backends.base import flatten

    if not saved.is_file():
        return []
    before = dict(flatten(OmegaConf.to_container(OmegaConf.load(saved), resolve=True)))
    after = dict(flatten(OmegaConf.to_container(plan.backend_cfg, resolve=True)))
    keys = sorted(set(before) | set(after))
    return [f"{k}: {before.get(k)!r} -> {after.get(k)!r}" for k in keys if before.get(k) != after.get(k)]


def _expected_steps(plan: Plan) -> int | None:
    try:
        return expected_steps(plan)
    except (TypeError, ValueError, ZeroDivisionError):
        return None  # an estimate for the live view, never a reason not to run


# -- launching ----------------------------------------------------------------------------------------------------


def launch(
    plan: Plan,
    args: list[str],
    resume: bool = False,
    detach: bool = False,
    echo: TextIO | None = None,
    notify: Callable[[str], None] | None = None,
    on_attempt: Callable[[RunDir, dict], None] | None = None,
) -> RunResult:
    """Run a checked plan. `echo` receives the trainer's output; `notify` what trainctl decided on the way;
    `on_attempt(run, attempt)` is called once the attempt is recorded and its trainer about to start."""
    echo = echo or sys.stdout
    notes: list[str] = []

    def note(text: str) -> None:
        notes.append(text)
        if notify:
            notify(text)

    run = RunDir(plan.run_dir)
    if run.exists() and not resume:
        state = run.status().get("state")
        raise TrainctlError(
            f"{relative(run.path)} already holds a run (state: {state}).",
            hint=f"resume it: trainctl train --resume {relative(run.path)}; or start another: "
            f"run.name={plan.cfg.run.name}-2",
        )
    preflight(plan)
    if resume:
        changes = config_changes(plan, run.path / plan.backend.config_file)
        if changes:
            note("resuming with a config that differs from the saved one: " + "; ".join(changes[:8]))
    if resume and plan.cfg.family == "sft":
        text, finished = prepare_sft_resume(plan)
        if text:
            note(text)
        if finished:
            return RunResult(run.path, "finished", 0, notes=notes)

    run.write_config(plan, args)
    tools.write_tool_config(plan)  # <run>/tools.yaml, issue 11
    attempt_n = len(run.status()["attempts"]) + 1
    command = full_command(plan, attempt_n)
    if resume and plan.backend.name == "trl-dpo":
        command.argv.append("--resume")
    run.write_command(plan, command, args)
    hw = plan.cfg.hardware
    env = {**os.environ, **command.env}

    if hw.launcher == "ray_job":
        return _launch_job(plan, run, command, env, detach, echo, notes, on_attempt)

    attempt = run.start_attempt(command, steps_total=_expected_steps(plan))
    run.set_live()  # from now on the run says running: its supervisor (this process) must be on record
    if on_attempt:
        on_attempt(run, attempt)
    supervisor = Supervisor(
        command.argv, env, run.log_path(attempt), echo=echo, tail_lines=400, on_start=run.set_live, on_tick=run.beat
    )
    outcome = supervisor.run()
    if outcome.interrupted is not None:
        state, code = "interrupted", EXIT_INTERRUPTED
    elif outcome.exit_code == 0:
        state, code = "finished", 0
    else:
        state, code = "failed", outcome.exit_code
    run.finish_attempt(state, outcome.exit_code, seconds=round(outcome.seconds, 2))
    tail = failure_excerpt(outcome.tail) if state == "failed" else outcome.tail[-20:]
    return RunResult(run.path, state, code, seconds=outcome.seconds, tail=tail, notes=notes)


def _launch_job(
    plan: Plan, run: RunDir, command: Command, env: dict, detach: bool, echo, notes, on_attempt=None
) -> RunResult:
    import shlex
    import time

    start = time.monotonic()
    from trainctl.secrets import secret_env

    config_file = plan.backend.config_file
    # the job's working dir holds the backend config; the shell expands $(pwd) there (Hydra wants an absolute path)
    job_command = plan.backend.command(plan.cfg, plan.built, config_dir=JOB_CONFIG_DIR)
    entrypoint = shlex.join(job_command.argv).replace(JOB_CONFIG_DIR, '"$(pwd)"')  # '@' needs no shell quoting
    job_env = {**command.env, **secret_env(env)}
    job_env.pop("RAY_ADDRESS", None)
    address = str(plan.cfg.hardware.ray_address)
    job_id = ray_jobs.submit(address, entrypoint, {config_file: run.path / config_file}, job_env, plan.cfg.run.name)
    attempt = run.start_attempt(command, job_id=job_id, address=address, steps_total=_expected_steps(plan))
    if detach:
        run.update_attempt(state="submitted")
        run.set_state("submitted")
        return RunResult(run.path, "submitted", 0, job_id=job_id, notes=notes)
    run.set_live()
    if on_attempt:
        on_attempt(run, attempt)
    info = ray_jobs.follow(address, job_id, echo, run.log_path(attempt), env, on_tick=run.beat)
    state = {"SUCCEEDED": "finished", "STOPPED": "interrupted"}.get(info.status, "failed")
    code = {"finished": 0, "interrupted": EXIT_INTERRUPTED}.get(state, EXIT_RUN_FAILED)
    seconds = time.monotonic() - start
    run.finish_attempt(state, code, job_status=info.status, message=info.message, seconds=round(seconds, 2))
    lines = run.log_path(attempt).read_text().splitlines()[-400:] if run.log_path(attempt).is_file() else []
    tail = failure_excerpt(lines) if state == "failed" else lines[-20:]
    return RunResult(run.path, state, code, seconds=seconds, job_id=job_id, tail=tail, notes=notes)
