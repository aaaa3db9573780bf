"""What the server does to runs (only with --allow-actions): plan a job, start, stop and resume it, and the
checkpoint tools (merge, eval, prune).

A job runs as the `trainctl train` command a user would type, detached from the server (trainctl.launch.control:
its own session, its own supervising trainctl), so that restarting the server does not touch it; its run folder's
command.sh records that command. Merge and eval are the `trainctl ckpt merge` and `trainctl eval` commands, run in
the background with their output in the run's logs/; prune shows what it would delete, and deletes only what it
showed.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import uuid as uuidlib
from dataclasses import dataclass, field
from pathlib import Path

from trainctl.errors import TrainctlError
from trainctl.paths import atomic_write_text
from trainctl.serve.store import RunStore, run_uuid

# the planner composes and asks verl or TRL for their own validation: seconds, more on a busy machine
PLAN_TIMEOUT_S = 600
JOB_FILE = "job.json"  # beside a run the server started: its uuid, description and the fields it was created with


class ActionError(TrainctlError):
    """A request that cannot be done as asked: status is the HTTP answer (404, 409, 422)."""

    def __init__(self, message: str, status: int = 409, hint: str | None = None, details: list[str] | None = None):
        super().__init__(message, hint=hint, details=details)
        self.status = status


def plan(fields: dict, recipe: str | None, overrides: list[str], root: Path) -> dict:
    """The planner's answer for a job (trainctl.serve.planner), run in its own process."""
    request = {"fields": fields, "recipe": recipe, "overrides": overrides, "root": str(root)}
    proc = subprocess.run(
        [sys.executable, "-m", "trainctl.serve.planner"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=PLAN_TIMEOUT_S,
    )
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-12:]
        raise ActionError(f"the planner failed (exit {proc.returncode}).", 500, details=tail) from None


def create(store: RunStore, spec: dict) -> dict:
    """Plan a job and keep it, not started: {uuid, plan, problems, ...}."""
    fields = {k: v for k, v in spec.items() if k not in ("recipe", "overrides", "description") and v is not None}
    answer = plan(fields, spec.get("recipe"), list(spec.get("overrides") or []), store.roots[0])
    run_dir = answer.get("run_dir")
    uid = run_uuid(Path(run_dir)) if run_dir else str(uuidlib.uuid4())
    job = {
        "uuid": uid,
        "name": answer.get("name"),
        "description": spec.get("description") or "",
        "fields": fields,
        "recipe": spec.get("recipe"),
        "overrides": list(spec.get("overrides") or []),
        "args": answer.get("args") or [],
        "run_dir": run_dir,
        "family": answer.get("family"),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "plan": answer.get("plan") or "",
        "problems": [p for p in answer.get("problems") or [] if p.get("severity", "error") == "error"],
        "warnings": answer.get("warnings") or [],
        "notes": answer.get("notes") or [],
        "command": "trainctl train " + " ".join(_quote(a) for a in answer.get("args") or []),
    }
    if run_dir and store.root_of(Path(run_dir)) is None:
        job["problems"].append(
            {
                "message": f"the run folder {run_dir} is outside the folders this server serves "
                f"({', '.join(map(str, store.roots))}).",
                "key": "run.dir",
                "details": [],
                "severity": "error",
                "hint": f"leave run.dir out (runs go to {store.roots[0]}/NAME)",
            }
        )
    if run_dir and (Path(run_dir) / "run.json").is_file():
        job["problems"].append(
            {
                "message": f"a run named {job['name']} exists already ({run_dir}).",
                "key": "name",
                "details": [],
                "severity": "error",
                "hint": "choose another name, or resume that run",
            }
        )
    store.save_pending(job)
    return job


def _quote(a: str) -> str:
    import shlex

    return shlex.quote(a)


def start(store: RunStore, uid: str) -> dict:
    """Start a created job: `trainctl train ARGS`, detached; returns once its trainer runs."""
    from trainctl.launch.control import start_detached

    job = store.pending_job(uid)
    if job is None:
        found = store.find(uid)
        if found:
            raise ActionError(
                f"{found[1].name} has started already.", 409, hint=f"POST /api/jobs/{uid}/resume continues it"
            )
        raise ActionError(f"no job {uid}.", 404, hint="create one: POST /api/jobs")
    if job["problems"]:
        raise ActionError(
            f"job {job['name']} has {len(job['problems'])} problem(s); nothing was started.",
            422,
            details=[p["message"] for p in job["problems"]],
        )
    run_dir = Path(job["run_dir"])
    started = start_detached(list(job["args"]), run_dir)
    store.drop_pending(uid)
    keep = {k: job[k] for k in ("uuid", "description", "fields", "recipe", "overrides", "args", "created")}
    atomic_write_text(run_dir / JOB_FILE, json.dumps({**keep, "started_by": "trainctl serve"}, indent=2) + "\n")
    return {
        "uuid": uid,
        "run": str(run_dir),
        "pid": started.pid,
        "trainer_pid": started.trainer_pid,
        "attempt": started.attempt,
        "command": job["command"],
    }


def resume(store: RunStore, path: Path, overrides: list[str]) -> dict:
    from trainctl.launch.control import start_detached

    entry = store.entry(store.root_of(path) or path.parent, path)
    if entry.info.alive:
        raise ActionError(f"{path.name} is {entry.info.status}; stop it before resuming.", 409)
    args = ["--resume", str(path), *overrides]
    started = start_detached(args, path)
    return {
        "uuid": run_uuid(path),
        "run": str(path),
        "pid": started.pid,
        "trainer_pid": started.trainer_pid,
        "attempt": started.attempt,
        "command": "trainctl train " + " ".join(_quote(a) for a in args),
    }


def stop(store: RunStore, path: Path, grace: float) -> dict:
    from trainctl.launch.control import stop_run

    entry = store.entry(store.root_of(path) or path.parent, path)
    if not entry.info.alive:
        raise ActionError(f"{path.name} is not running ({entry.info.status}).", 409)
    return {"uuid": run_uuid(path), "message": stop_run(path, grace)}


# -- checkpoint tools --------------------------------------------------------------------------------------------


@dataclass
class Action:
    """A background command started by the server (a merge, an eval): what it is and how it ended."""

    id: str
    kind: str
    run: str
    argv: list[str]
    log: Path
    proc: subprocess.Popen | None = None
    started: float = field(default_factory=time.time)
    exit_code: int | None = None

    def data(self) -> dict:
        if self.proc is not None and self.exit_code is None:
            self.exit_code = self.proc.poll()
        from trainctl.serve.reading import last_lines

        lines, _ = last_lines(self.log, 40)
        state = "running" if self.exit_code is None else ("done" if self.exit_code == 0 else "failed")
        return {
            "id": self.id,
            "kind": self.kind,
            "run": self.run,
            "command": " ".join(_quote(a) for a in ["trainctl", *self.argv[3:]]),
            "state": state,
            "exit_code": self.exit_code,
            "log": self.log.name,
            "output": lines,
        }


class Actions:
    def __init__(self):
        self._all: dict[str, Action] = {}
        self._lock = threading.Lock()

    def run(self, kind: str, run: Path, args: list[str]) -> Action:
        """`trainctl ARGS` in the background, its output in the run's logs/serve-KIND-N.log."""
        with self._lock:
            busy = [
                a for a in self._all.values() if a.run == str(run) and a.kind == kind and a.data()["state"] == "running"
            ]
            if busy:
                raise ActionError(f"a {kind} of {run.name} is running already ({busy[0].id}).", 409)
            aid = uuidlib.uuid4().hex[:12]
            log = run / "logs" / f"serve-{kind}-{time.strftime('%Y%m%d-%H%M%S')}-{aid[:4]}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            argv = [sys.executable, "-m", "trainctl", *args]
            with open(log, "w") as out:
                proc = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
            action = Action(aid, kind, str(run), argv, log, proc)
            self._all[aid] = action
            return action

    def get(self, aid: str) -> Action | None:
        return self._all.get(aid)

    def of(self, run: Path) -> list[Action]:
        return [a for a in self._all.values() if a.run == str(run)]

    def stop_all(self) -> None:
        """The server's own children end with it (a merge or eval half done is written to a temporary folder)."""
        import signal

        for a in self._all.values():
            if a.proc is not None and a.proc.poll() is None:
                with contextlib.suppress(OSError):
                    os.killpg(a.proc.pid, signal.SIGTERM)


def checkpoint_path(run: Path, step: int) -> Path:
    from trainctl.ckpt.layout import list_checkpoints

    listing = list_checkpoints(run)
    found = next((c for c in listing.checkpoints if c.step == step), None)
    if found is None:
        steps = [c.step for c in listing.checkpoints]
        raise ActionError(f"{run.name} has no checkpoint at step {step}.", 404, hint=f"steps: {steps}")
    if found.incomplete:
        raise ActionError(f"the checkpoint at step {step} is incomplete ({found.incomplete}).", 409)
    return found.path


def prune_plan(run: Path, keep_last: int, keep_best: str | None, mode: str | None):
    from trainctl.ckpt.layout import CheckpointError
    from trainctl.ckpt.select import plan_prune

    try:
        return plan_prune(run, keep_last, keep_best, mode)
    except CheckpointError as e:
        raise ActionError(e.message, 422, hint=e.hint, details=e.details) from None


def prune(run: Path, keep_last: int, keep_best: str | None, mode: str | None, confirm: list[str] | None) -> dict:
    """Without `confirm`: what would be deleted. With it (the paths shown): deletes them, if the plan is still
    exactly that (a checkpoint written since changes it: shown again, nothing deleted)."""
    from trainctl.ckpt.select import apply_prune

    plan = prune_plan(run, keep_last, keep_best, mode)
    shown = {
        "keep": [{"path": str(c.path.relative_to(run)), "step": c.step, "why": why} for c, why in plan.keep],
        "delete": [{"path": str(c.path.relative_to(run)), "step": c.step, "size": c.size} for c in plan.delete],
        "freed": plan.freed,
        "deleted": False,
    }
    if confirm is None:
        return shown
    if sorted(confirm) != sorted(d["path"] for d in shown["delete"]):
        raise ActionError(
            "the checkpoints to delete changed since they were shown; nothing was deleted.",
            409,
            details=[f"now: {', '.join(d['path'] for d in shown['delete']) or 'none'}"],
        )
    apply_prune(plan)
    return {**shown, "deleted": True}
