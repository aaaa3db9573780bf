"""Running a plan: preflight, the run folder, the launcher, the outcome.

Everything that can fail because of the user's config, data, model or machine fails here, before a process
starts (preflight); the trainer's own failures come back with its exit code and the tail of its log.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from trainctl import launchers
from trainctl.backends.base import JOB_CONFIG_DIR, Command
from trainctl.checks.native import critic_needed
from trainctl.errors import ConfigProblems, TrainctlError
from trainctl.launch import tools
from trainctl.launch.checkpoints import repair_marker
from trainctl.launch.rundir import RunDir, relative
from trainctl.launchers.base import Job
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


DISK_FULL = "the disk filled up"
RAY_WORKER_DIED = "a Ray worker died"
# what a failed trainer's log says, recognised: (pattern, what happened, what to do besides resuming, in a few words)
_FAILURES = (
    (
        # Ray's words (its GCS's) for the actors of a node whose raylet is gone
        re.compile(r"NodeDiedError|The actor died because its node has died"),
        "a node of the Ray cluster was lost (its raylet stopped, or its machine went away), with the run's workers",
        "`ray status` on the head shows the nodes that are left; resume when the cluster has what the run needs",
        "a Ray node was lost",
    ),
    (
        re.compile(r"ActorDiedError|RayActorError|The actor died unexpectedly|ray\.exceptions\.\w*(?:Died|Lost)"),
        "a Ray worker of the run died (killed by a signal, or by the kernel for lack of memory)",
        "if nothing killed it, look for memory: `dmesg | grep -i oom` and the log",
        RAY_WORKER_DIED,
    ),
    (
        re.compile(
            r"No space left on device|Errno 28|File too large|Errno 27|Disk quota exceeded"
            r"|PytorchStreamWriter failed writing|file write failed"
            # torch's zip writer, when a write comes back short: "[enforce fail at inline_container.cc:672] .
            # unexpected pos 1048576 vs 1048512"
            r"|inline_container\.cc.*unexpected pos"
        ),
        "the disk filled up (or a file-size limit was hit) while the trainer wrote",
        "free space (trainctl ckpt prune RUN --keep-last 2 shows what it would delete); the checkpoint being "
        "written is incomplete and is not resumed from",
        DISK_FULL,
    ),
)


def diagnose(lines: list[str]) -> tuple[str, str, str] | None:
    """What a failed trainer's output says happened, when it is one of the failures trainctl knows: (what
    happened, what to do, the same in a few words)."""
    text = "\n".join(lines)
    for pattern, what, hint, cause in _FAILURES:
        if pattern.search(text):
            return what, hint, cause
    return None


@dataclass
class RunResult:
    run_dir: Path
    state: str  # finished | failed | interrupted | submitted
    exit_code: int
    seconds: float = 0.0
    job_id: str | None = None
    tail: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    reason: str | None = None  # why an interrupted run stopped: Ctrl-C, SIGTERM, terminal closed
    # a failure trainctl recognised: (what happened, what to do, the same in a few words)
    diagnosis: tuple[str, str, str] | None = None
    resume_from: str | None = None  # a failed run's last whole checkpoint, in words (`step 6 (runs/x/...)`)


def launch_env(plan: Plan, attempt: int | None = None) -> dict[str, str]:
    """The environment a run adds for its trainer (on top of the user's): platform, loggers, paths."""
    run = plan.run_dir
    # TRAINCTL_LAUNCHED: trainctl's verl plugin acts only in processes trainctl started (runtime/verl_cpu_plugin.py)
    env: dict[str, str] = {"PYTHONUNBUFFERED": "1", "HYDRA_FULL_ERROR": "1", "TRAINCTL_LAUNCHED": "1"}
    hw = plan.cfg.hardware
    if hw.device == "cpu" and plan.backend.node == "verl":
        env["VERL_PLATFORM"] = "cpu"  # trainctl's verl plugin (trainctl.runtime.verl_cpu_plugin)
        # verl's DataProto crosses Ray as a torch.save of its consolidated tensors by default: the agent loop sends
        # every sample to the reward worker so, 1.3 ms to write and 0.7 ms to read (a slow host); verl's own numpy
        # encoding of the same tensors takes 0.4 and 0.2 ms. Every process of the run must read the variable alike
        env["VERL_DATAPROTO_SERIALIZATION_METHOD"] = "numpy"
    if hw.device == "cpu" and "OMP_WAIT_POLICY" not in os.environ:
        # torch's OpenMP threads spin while they wait for each other: with anything else running, a pass waits on a
        # thread whose core is taken while the others spin. Measured on 2 cores beside one busy process: the tiny DPO
        # recipe (torch's 2 threads) 318-354 s -> 31 s, a tiny GRPO step (2 training threads) 4.6-4.9 -> 2.2-2.4 s;
        # on the quiet machine 22.8-23.3 -> 23.9-24.0 s and 1.80-1.82 -> 1.75-1.84 s. The user's setting stands
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    if hw.device == "cpu" and hw.cpu_threads:
        # Ray gives each worker OMP_NUM_THREADS=1 unless the environment sets it
        env["OMP_NUM_THREADS"] = str(hw.cpu_threads)
    if hw.device == "cpu" and (hw.rollout_threads or hw.cpu_threads):
        env["TRAINCTL_ROLLOUT_THREADS"] = str(hw.rollout_threads or hw.cpu_threads)  # the hf rollout server's own
    if plan.cfg.family == "ppo":
        env["TRAINCTL_REWARD_KIND"] = plan.cfg.reward.kind  # reward metrics (trainctl.runtime.reward_metrics)
    if plan.backend.node == "verl" and not _uses_vllm(plan):
        # verl imports vLLM wherever it is installed (its checkpoint engines), ~1 s in three of a PPO run's processes
        # and in each SFT rank, which never use it: the plugin hides it (trainctl.import_cost)
        env["TRAINCTL_NO_VLLM"] = "1"
    if plan.backend.node == "verl" and (plan.cfg.family == "sft" or not critic_needed(plan.value)):
        # verl imports TRL as it loads a model, for a critic's value-head model (~1 s of the training worker's CPU,
        # and the fork server's preload of TRL): SFT has no critic, nor has a PPO-family run without one (GRPO)
        env["TRAINCTL_NO_TRL"] = "1"
    env.update(tools.env(plan))  # tool metrics (trainctl.runtime.tool_metrics), issue 11
    if plan.cfg.family == "ppo" and plan.cfg.env.kind != "none":
        env["TRAINCTL_ENV"] = plan.cfg.env.kind  # per-task rewards and the curriculum (trainctl.runtime.env_metrics)
    if plan.cfg.family == "ppo" and plan.cfg.offpolicy.mode != "off":
        # the staleness distribution and the trainer's wait (trainctl.runtime.offpolicy_metrics)
        cap = plan.cfg.offpolicy.max_staleness
        env["TRAINCTL_OFFPOLICY"] = f"{plan.cfg.offpolicy.mode}:{'' if cap is None else cap}"
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
    if plan.backend.node == "trl" and launchers.get(hw.launcher).torchrun_mode() == "ray":
        # Ray Train sizes itself from this (trainctl.runtime.trl_entry --ray)
        env["TRAINCTL_HARDWARE"] = json.dumps({k: getattr(hw, k) for k in ("nnodes", "gpus_per_node", "device")})
    if launchers.get(hw.launcher).ray == "join" and not os.environ.get("RAY_RUNTIME_ENV_HOOK"):
        from trainctl.secrets import is_secret_name

        # a cluster's Ray workers do not inherit the driver's environment: Ray's hook gives them these names' values
        # through the driver's runtime_env (trainctl.runtime.ray_env); never a secret (Ray shows a runtime_env)
        env["TRAINCTL_RAY_ENV"] = ",".join(sorted(k for k in env if not is_secret_name(k)))
        env["RAY_RUNTIME_ENV_HOOK"] = "trainctl.runtime.ray_env.hook"
    return env


# the engines a PPO-family run of verl may start: its rollout, its reward model's, its distillation teacher's
_ENGINE_KEYS = (
    "actor_rollout_ref.rollout.name",
    "reward.reward_model.rollout.name",
    "distillation.teacher_models.teacher_model.inference.name",
)


def _uses_vllm(plan: Plan) -> bool:
    return any(plan.value(key) == "vllm" for key in _ENGINE_KEYS)


def full_command(plan: Plan, attempt: int | None = None) -> Command:
    """The plan's command (built once, with the plan) with the run's environment added."""
    cmd = plan.command
    return dataclasses.replace(cmd, argv=list(cmd.argv), env={**launch_env(plan, attempt), **cmd.env})


# -- preflight ----------------------------------------------------------------------------------------------------


def preflight(plan: Plan) -> None:
    """What only a real launch needs from this machine or cluster: devices, launch tools, rollout engines, tokens."""
    problems = launchers.get(plan.cfg.hardware.launcher).preflight(plan)
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
    if plan.backend.node == "trl":
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
    new_folder = not run.path.exists()
    lock = run.lock()  # a second trainctl for the same run is refused here (the folder is made to hold the lock)
    try:
        return _run_locked(plan, run, args, resume, detach, echo, note, notes, on_attempt)
    except BaseException:
        if new_folder:  # refused before anything was written (the preflight): no empty run folder is left behind
            with contextlib.suppress(OSError):
                run.path.rmdir()  # only an empty one
        raise
    finally:
        lock.release()  # also when refused or failed before the start: a process that goes on (serve) may run it next


def _run_locked(plan, run, args, resume, detach, echo, note, notes, on_attempt) -> RunResult:
    """launch(), its run's lock held."""
    if run.exists() and not resume:
        state = run.status().get("state")
        raise TrainctlError(
            f"{relative(run.path)} already holds a run (state: {state}).",
            hint=f"resume it: trainctl train --resume {relative(run.path)}; or start another: "
            f"run.name={plan.cfg.run.name}-2",
        )
    preflight(plan)
    for text in tools.before_launch(plan, run.path, resume):  # the tokenization preflight; the tool servers' record
        note(text)
    if resume:
        repaired = repair_marker(Path(plan.value("trainer.default_local_dir") or run.checkpoints))
        if repaired:
            note(repaired)
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
    if resume and plan.backend.node == "trl":
        command.argv.append("--resume")
    run.write_command(plan, command, args)
    launcher = launchers.get(plan.cfg.hardware.launcher)
    job = Job(
        argv=command.argv,
        env={**os.environ, **command.env},
        added_env=dict(command.env),
        run_name=plan.cfg.run.name,
        steps_total=_expected_steps(plan),
        echo=echo or sys.stdout,
        detach=detach,
        watch=dataclasses.asdict(plan.cfg.run.watch),
    )
    if launcher.ray == "inside":
        _job_parts(plan, run, job)
    checkpoints = Path(plan.value("trainer.default_local_dir") or run.checkpoints)
    resumed_from = latest_verl_step(checkpoints) if resume else None
    ended = launcher.start(job, run, on_attempt)
    if ended.state == "finished" and resumed_from is not None:
        ended = _trained_something(run, ended, resumed_from, job.steps_total)
    tail = failure_excerpt(ended.tail) if ended.state == "failed" else ended.tail[-20:]
    verdict = None
    if ended.state == "failed":
        said = diagnose(ended.tail)
        # a launcher's own verdict (Slurm's job state) stands; what the trainer's own error says wins over a death
        # trainctl saw (ended.watched), unless a death is all it says
        if ended.verdict and not ended.watched:
            verdict = ended.verdict
        else:
            verdict = said if said and said[2] != RAY_WORKER_DIED else ended.verdict or said
        verdict = _recorded_verdict(run, plan, verdict)
    return RunResult(
        run.path,
        ended.state,
        ended.exit_code,
        seconds=ended.seconds,
        job_id=ended.job_id,
        tail=tail,
        notes=notes,
        reason=ended.reason,
        diagnosis=verdict,
        resume_from=last_whole_checkpoint(checkpoints) if ended.state == "failed" else None,
    )


def _trained_something(run: RunDir, ended, resumed_from: int, steps_total: int | None):
    """A resumed attempt that ended well having logged no step, with steps left to train, failed: verl has
    resumed runs that exited 0 having trained nothing (verl #7401), which a script would take for a finished run."""
    from trainctl.metrics import read_jsonl

    if steps_total is None or resumed_from >= steps_total:
        return ended  # nothing was left to train
    attempt = run.status()["attempts"][-1]
    path = run.metrics_path(attempt)
    logged = read_jsonl(path) if path.is_file() else {}
    if any(step > resumed_from for step in logged):
        return ended
    what = (
        f"the resumed attempt ended well but trained nothing: it started from step {resumed_from} of {steps_total} "
        "and logged no step"
    )
    hint = "the log says what the trainer did instead (a dataloader that was already exhausted, a step limit)"
    verdict = (what, hint, "the resumed attempt trained nothing")
    run.finish_attempt("failed", ended.exit_code, seconds=round(ended.seconds, 2))
    return dataclasses.replace(ended, state="failed", verdict=verdict)


def disk_needs(checkpoints: Path) -> str:
    """How much a checkpoint of the run takes (its last whole one's size) and how much is free where it saves."""
    import shutil

    from trainctl.ckpt.layout import CheckpointError, list_checkpoints
    from trainctl.models.pull import human

    try:
        free = shutil.disk_usage(checkpoints).free
    except OSError:
        return ""
    where = f"{human(free)} is free at {relative(checkpoints)}"
    try:
        latest = list_checkpoints(checkpoints).latest
    except (CheckpointError, OSError):
        return f" ({where})"
    return f" (a checkpoint of this run takes {human(latest.size)}, as step {latest.step}'s does; {where})"


def last_whole_checkpoint(checkpoints: Path) -> str | None:
    """The newest checkpoint a resume would start from, in words (`step 18 (runs/x/checkpoints/global_step_18)`)."""
    from trainctl.ckpt.layout import CheckpointError, list_checkpoints

    try:
        latest = list_checkpoints(checkpoints).latest
    except (CheckpointError, OSError):
        return None
    return f"step {latest.step} ({relative(latest.path)})" if latest.step is not None else relative(latest.path)


def _recorded_verdict(run: RunDir, plan: Plan, verdict: tuple[str, str, str] | None) -> tuple[str, str, str] | None:
    """A failed attempt's verdict, with the checkpoint a resume starts from, recorded in run.json (`runs ls`,
    `runs show` and the server say what the command said)."""
    if verdict is None:
        return None
    what, hint, cause = verdict
    checkpoints = Path(plan.value("trainer.default_local_dir") or run.checkpoints)
    if cause == DISK_FULL:
        what += disk_needs(checkpoints)
    whole = last_whole_checkpoint(checkpoints)
    hint = f"{hint}; the last whole checkpoint is {whole}" if whole else f"{hint}; no checkpoint was saved"
    with contextlib.suppress(OSError, ValueError, IndexError):
        run.update_attempt(verdict=what, hint=hint, cause=cause)
    return what, hint, cause


def _job_parts(plan: Plan, run: RunDir, job: Job) -> None:
    """What a Ray job carries: its entrypoint (the config read from the job's working dir), the backend config
    staged (and for tools, the job's tools.yaml and the files it names), and the run's environment additions with
    no secret but those hardware.forward_secrets names (Ray shows a job's env_vars to every token holder)."""
    import shlex

    config_file = plan.backend.config_file
    # the job's working dir holds the backend config; the shell expands $(pwd) there (Hydra wants an absolute path)
    job_command = plan.backend.command(plan.cfg, plan.built, config_dir=JOB_CONFIG_DIR)
    tool_files, tool_overrides = tools.job_parts(plan, JOB_CONFIG_DIR)  # tools.yaml and what it names, issue 30
    argv = [*job_command.argv, *tool_overrides]
    job.entrypoint = shlex.join(argv).replace(JOB_CONFIG_DIR, '"$(pwd)"')  # '@' needs no shell quoting
    job.staged = {config_file: run.path / config_file, **tool_files}
    job.job_env = job_env(job.added_env, job.env, plan.cfg.hardware.forward_secrets)
    job.address = str(plan.cfg.hardware.ray_address)


def job_env(added: dict[str, str], env: dict[str, str], forward: list[str]) -> dict[str, str]:
    """A Ray job's env_vars: the run's own additions, never a secret, plus the secrets the user forwards."""
    from trainctl.secrets import is_secret_name

    out = {k: v for k, v in added.items() if not is_secret_name(k) and k != "RAY_ADDRESS"}
    out.update({name: env[name] for name in forward if env.get(name)})
    return out
