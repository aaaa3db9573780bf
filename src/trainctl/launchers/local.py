"""hardware.launcher=local: the trainer runs on this machine, a supervised child of trainctl.

The supervising trainctl (trainctl.launchers.supervisor) records itself in run.json (`live`: its PID and start time,
the trainer's PID, a heartbeat); a run whose state says running while that PID is gone was killed. `runs stop`
sends the supervisor SIGINT, as Ctrl-C would, and escalates when it does not end in time.

A run writes only under its run folder and trainctl's home and cache (trainer_env_at_start): the libraries the
trainer runs would write into the user's home otherwise.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import time
from pathlib import Path
from typing import Any

from trainctl.errors import EXIT_INTERRUPTED, Problem, TrainctlError
from trainctl.launchers import register
from trainctl.launchers.base import STOP_GRACE_SECONDS, Ended, Job, Launcher, Status

# the datasets library's cache (verl's and TRL's datasets), under trainctl's cache folder
DATASETS_CACHE = "hf-datasets"
WANDB_CACHE = "wandb"
# a heartbeat older than this (from another machine, where the PID cannot be checked) means the run is lost
STALE_SECONDS = 30.0


def trainer_env_at_start(env: dict[str, str], own_ray: bool, scratch: Path | None = None) -> dict[str, str]:
    """What the trainer's environment gets when it starts, and never on record (command.sh, run.json):

    - a Ray the trainer starts itself (main_ppo's ray.init()) gets a token of its own, RAY_AUTH_TOKEN (a secret:
      redacted from the log). Ray 2.60 turns token authentication on for a new local cluster and, finding no token,
      writes one to ~/.ray/auth_token; from then on every `ray start --head` on the machine asks for a token, and
      Ray clients that send none (no RAY_AUTH_MODE=token) are refused, a second node joining included. Ray's loader
      reads RAY_AUTH_TOKEN before that file and writes nothing. The user's explicit RAY_AUTH_MODE=disabled stands;
      a cluster the trainer joins (ray_cluster) is the user's, and keeps the user's settings.
    - the `datasets` library's cache (verl's and TRL's datasets load the parquet files through it: an Arrow copy of
      each) goes to trainctl's cache instead of ~/.cache/huggingface/datasets, unless the user chose a place
      (HF_DATASETS_CACHE, HF_HOME); so do vLLM's caches and config (~/.cache/vllm, ~/.config/vllm), with a Ray of
      its own vLLM's sockets (/tmp), and wandb's cache (~/.cache/wandb, where wandb-core writes a debug log per run,
      offline too).
    - its temporary files (TMPDIR) go to `scratch`, the attempt's folder under trainctl's cache (trainctl.scratch),
      unless the user chose a place.
    """
    from trainctl import scratch as temporary
    from trainctl.facts.vllm import home_env as vllm_home_env
    from trainctl.facts.vllm import rpc_env as vllm_rpc_env
    from trainctl.paths import cache_dir

    out: dict[str, str] = temporary.env(scratch, env)
    if own_ray and env.get("RAY_AUTH_MODE", "").strip().lower() != "disabled":
        out.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    if not (env.get("HF_DATASETS_CACHE") or env.get("HF_HOME")):
        out["HF_DATASETS_CACHE"] = str(cache_dir() / DATASETS_CACHE)
    out.update(vllm_home_env(cache_dir(), env))  # a vLLM rollout's caches and config (trainctl.facts.vllm)
    if own_ray:  # and its sockets, on this machine (a cluster's other nodes have no such folder)
        out.update(vllm_rpc_env(cache_dir(), env))
    if not env.get("WANDB_CACHE_DIR"):  # wandb-core's debug logs (offline too) and its artifact cache
        out["WANDB_CACHE_DIR"] = str(cache_dir() / WANDB_CACHE)
    return out


def pid_alive(pid: int | None, started: float | None = None) -> bool:
    """The process is alive and, when its start time is known, the same one (PIDs are reused)."""
    if not pid:
        return False
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return started is None or abs(proc.create_time() - started) < 1.0
    except psutil.Error:
        return False


@register("local")
class Local(Launcher):
    description = "this machine: the trainer is a child of trainctl, stopped with it"

    def preflight(self, plan: Any) -> list[Problem]:
        problems: list[Problem] = []
        hw = plan.cfg.hardware
        if hw.device == "cuda":
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
        program = plan.command.argv[0]
        if not (Path(program).is_file() or shutil.which(program)):
            problems.append(
                Problem(f"{program} is not there.", hint="install torch in this environment (make install)")
            )
        return problems

    # -- running -------------------------------------------------------------------------------------------------

    def start(self, job: Job, run: Any, on_attempt=None) -> Ended:
        from trainctl import scratch as temporary
        from trainctl.launchers.supervisor import REASONS, Supervisor
        from trainctl.launchers.tree import new_mark
        from trainctl.launchers.vitals import Vitals

        mark = new_mark()
        with contextlib.suppress(OSError):
            (run.path / STOP_FILE).unlink(missing_ok=True)  # an earlier attempt's
        attempt = run.start_attempt(self.name, steps_total=job.steps_total, mark=mark)
        run.set_live()  # from now on the run says running: its supervisor (this process) must be on record
        if on_attempt:
            on_attempt(run, attempt)
        scratch = temporary.make()  # the trainer's temporary files: removed with the attempt's end
        try:
            supervisor = Supervisor(
                job.argv,
                {**job.env, **trainer_env_at_start(job.env, own_ray=self.ray == "own", scratch=scratch)},
                run.log_path(attempt),
                echo=job.echo,
                tail_lines=400,
                on_start=run.set_live,
                on_tick=run.beat,
                mark=mark,
                watchdog=(run.path, attempt["n"]),
                vitals=Vitals(**job.watch, progress=run.metrics_path(attempt)) if job.watch else None,
            )
            started = time.time()
            outcome = supervisor.run()
        finally:
            temporary.remove(scratch)
        reason = None
        if outcome.interrupted is not None:
            state, code = "interrupted", EXIT_INTERRUPTED
            reason = REASONS.get(outcome.interrupted, f"signal {outcome.interrupted}")
            reason = _stop_request(run) or reason
        elif outcome.exit_code == 0:
            state, code = "finished", 0
        else:
            state, code = "failed", outcome.exit_code
        extra = {"reason": reason} if reason else {}
        verdict, watched = None, False
        if state == "failed":
            verdict = self.explain(job, started, outcome.tail)  # the launcher's own word (a lost Ray node) stands
            if verdict is None and outcome.fault is not None:
                verdict, watched = (outcome.fault.verdict(), outcome.fault.hint(), outcome.fault.cause()), True
        run.finish_attempt(state, outcome.exit_code, seconds=round(outcome.seconds, 2), **extra)
        return Ended(
            state, code, seconds=outcome.seconds, tail=outcome.tail, reason=reason, verdict=verdict, watched=watched
        )

    # -- status --------------------------------------------------------------------------------------------------

    def live_status(self, attempt: dict, live: dict, query: bool = True) -> Status:
        if not live:
            return Status("killed", "its supervisor never reported (trainctl was stopped at the start)")
        if live.get("host") and live["host"] != socket.gethostname():
            age = time.time() - float(live.get("heartbeat") or 0)
            if age <= STALE_SECONDS:
                return Status("running", f"on {live['host']}")
            return Status("lost", f"on {live['host']}; no heartbeat for {age:.0f} s")
        if pid_alive(live.get("pid"), live.get("pid_started")):
            detail = f"PID {live['pid']}"
            age = time.time() - float(live.get("heartbeat") or 0)
            if age > STALE_SECONDS:
                detail += f"; no heartbeat for {age:.0f} s: stopped (Ctrl-Z) or hung?"
            return Status("running", detail)
        trainer = live.get("trainer_pid")
        if trainer and pid_alive(trainer):
            return Status("killed", f"trainctl (PID {live.get('pid')}) is gone; its trainer (PID {trainer}) still runs")
        return Status("killed", f"trainctl (PID {live.get('pid')}) is gone")

    # -- stopping ------------------------------------------------------------------------------------------------

    def stop(self, run: Any, grace: float = STOP_GRACE_SECONDS) -> str:
        from trainctl.launchers.tree import marked, stop_marked

        status = run.status()
        attempt = status["attempts"][-1] if status.get("attempts") else {}
        live = status.get("live") or {}
        pid = live.get("pid")
        if status.get("state") == "running" and pid_alive(pid, live.get("pid_started")):
            if live.get("host") and live["host"] != socket.gethostname():
                raise TrainctlError(
                    f"{run.path.name} runs on {live['host']}: its supervisor can only be stopped there.",
                    hint=f"on {live['host']}: trainctl runs stop {run.path}",
                )
            _request_stop(run)
            # as Ctrl-C: the supervisor stops the trainer's processes and records the attempt, then SIGTERM, and
            # last SIGKILL (the attempt's watchdog then stops what is left and records it as killed)
            for sig, wait in ((signal.SIGINT, grace), (signal.SIGTERM, 15.0), (signal.SIGKILL, 30.0)):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
                if _wait_ended(run, pid, live.get("pid_started"), wait):
                    break
            left = stop_marked(attempt["mark"]) if attempt.get("mark") else 0
            ended = run.status()["attempts"][-1]
            extra = f"; {left} leftover processes stopped" if left else ""
            return f"stopped {run.path.name} (attempt {ended['n']}: {ended.get('state')}){extra}"
        leftovers = marked(attempt["mark"]) if attempt.get("mark") else []
        if leftovers:  # its trainctl was killed and no watchdog cleaned up (or it is still at work)
            n = stop_marked(attempt["mark"])
            if status.get("state") == "running":
                run.finish_attempt("killed", None, reason="trainctl was gone; runs stop stopped the processes it left")
            return f"{run.path.name} was not running, but {n} of its processes were: stopped them"
        raise TrainctlError(
            f"{run.path.name} is not running (state: {status.get('state')}).",
            hint=f"trainctl runs show {run.path}",
        )


STOP_FILE = "stop-requested"


def _request_stop(run: Any) -> None:
    """Leave word that the stop was asked for, so that the supervisor records why it was interrupted."""
    with contextlib.suppress(OSError):
        (run.path / STOP_FILE).write_text(f"{os.getpid()} {time.time()}\n")


def _stop_request(run: Any) -> str | None:
    path = run.path / STOP_FILE
    if not path.is_file():
        return None
    with contextlib.suppress(OSError):
        path.unlink()
    return "stopped by trainctl runs stop"


def _wait_ended(run: Any, pid: int, started: float | None, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not pid_alive(pid, started):
            return True
        time.sleep(0.25)
    return False
