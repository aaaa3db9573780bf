"""hardware.launcher=ray_job: the trainer runs as a job submitted to a Ray cluster's Jobs API.

trainctl submits the job and, unless --detach, follows it: its output streams into the run's log, Ctrl-C (or
`runs stop`) stops the job. The job itself lives on the cluster: a trainctl that dies while following it leaves it
running there (`runs ls` asks the cluster; `runs show --follow` attaches again; `runs stop` stops it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Any

from trainctl.errors import EXIT_INTERRUPTED, EXIT_RUN_FAILED, Problem, TrainctlError
from trainctl.launchers import register
from trainctl.launchers.base import STOP_GRACE_SECONDS, Ended, Job, Launcher, Status
from trainctl.launchers.local import pid_alive

# Ray job states -> run statuses
_JOB_STATUS = {"PENDING": "queued", "RUNNING": "running", "SUCCEEDED": "done", "FAILED": "failed", "STOPPED": "stopped"}


@register("ray_job")
class RayJob(Launcher):
    description = "a job on a Ray cluster's Jobs API (hardware.ray_address: the dashboard, http://HEAD_IP:8265)"
    ray = "inside"
    address_example = "http://HEAD_IP:8265"

    def preflight(self, plan: Any) -> list[Problem]:
        """The cluster's token, then the cluster's own answer: does the job's interpreter there have the run's
        packages at the versions of its lock.json (trainctl.launchers.job_python)."""
        from trainctl.launchers import job_python, ray_jobs

        address = str(plan.cfg.hardware.ray_address or "")
        mode = ray_jobs.auth_mode(address)
        if mode == "token" and ray_jobs.auth_token()[0] is None:
            return [
                Problem(
                    f"the Ray cluster at {address} asks for a token (token authentication), and none was found in "
                    f"{ray_jobs.auth_token()[1]}.",
                    key="hardware.ray_address",
                    hint=ray_jobs.TOKEN_HINT,
                )
            ]
        return job_python.check(plan)

    def start(self, job: Job, run: Any, on_attempt=None) -> Ended:
        from trainctl.launchers import ray_jobs

        begin = time.monotonic()
        address = str(job.address)
        job_id = ray_jobs.submit(address, job.entrypoint, job.staged, job.job_env, job.run_name)
        attempt = run.start_attempt(self.name, job_id=job_id, address=address, steps_total=job.steps_total)
        if job.detach:
            run.update_attempt(state="submitted")
            run.set_state("submitted")
            return Ended("submitted", 0, job_id=job_id)
        run.set_live()
        if on_attempt:
            on_attempt(run, attempt)
        info = ray_jobs.follow(address, job_id, job.echo, run.log_path(attempt), job.env, on_tick=run.beat)
        state = {"SUCCEEDED": "finished", "STOPPED": "interrupted"}.get(info.status, "failed")
        code = {"finished": 0, "interrupted": EXIT_INTERRUPTED}.get(state, EXIT_RUN_FAILED)
        seconds = time.monotonic() - begin
        reason = info.message if state == "interrupted" else None
        run.finish_attempt(state, code, job_status=info.status, message=info.message, seconds=round(seconds, 2))
        log = run.log_path(attempt)
        tail = log.read_text(errors="replace").splitlines()[-400:] if log.is_file() else []
        return Ended(state, code, seconds=seconds, tail=tail, reason=reason, job_id=job_id)

    def live_status(self, attempt: dict, live: dict, query: bool = True) -> Status:
        if not attempt.get("job_id"):
            return Status("killed", "trainctl was stopped before it submitted the job")
        job_id, address = attempt["job_id"], attempt.get("address", "")
        if not query:
            return Status("unknown", f"Ray job {job_id}")
        from trainctl.launchers import ray_jobs

        try:
            job = ray_jobs.job_status(address, job_id)
        except TrainctlError as e:
            return Status("unknown", f"Ray job {job_id}: {e.message}")
        detail = f"Ray job {job_id}" + (f": {job.message}" if job.status == "FAILED" and job.message else "")
        return Status(_JOB_STATUS.get(job.status, job.status.lower()), detail)

    def stop(self, run: Any, grace: float = STOP_GRACE_SECONDS) -> str:
        from trainctl.launchers import ray_jobs

        status = run.status()
        attempt = status["attempts"][-1] if status.get("attempts") else {}
        if not attempt.get("job_id") or status.get("state") not in ("running", "submitted"):
            raise TrainctlError(
                f"{run.path.name} is not running (state: {status.get('state')}).",
                hint=f"trainctl runs show {run.path}",
            )
        live = status.get("live") or {}
        if pid_alive(live.get("pid"), live.get("pid_started")):
            # a trainctl here follows the job: as Ctrl-C there, it stops the job and records how it ended
            with contextlib.suppress(ProcessLookupError):
                os.kill(live["pid"], signal.SIGINT)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and pid_alive(live["pid"], live.get("pid_started")):
                time.sleep(0.25)
            if not pid_alive(live["pid"], live.get("pid_started")):
                return f"stopped {run.path.name} (Ray job {attempt['job_id']})"
        info = ray_jobs.stop_job(attempt.get("address", ""), attempt["job_id"], wait=grace)
        if run.status().get("state") in ("running", "submitted"):
            run.finish_attempt(
                "interrupted", EXIT_INTERRUPTED, job_status=info.status, reason="stopped by trainctl runs stop"
            )
        return f"stopped {run.path.name} (Ray job {attempt['job_id']}: {info.status})"

    def logs(self, run_dir, attempt: dict) -> str:
        from trainctl.launchers import ray_jobs

        if attempt.get("job_id"):
            return ray_jobs.job_logs(attempt.get("address", ""), attempt["job_id"])
        return super().logs(run_dir, attempt)
