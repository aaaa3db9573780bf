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
import re
import subprocess
import sys
import threading
import time
import uuid as uuidlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from trainctl.errors import TrainctlError
from trainctl.paths import atomic_write_text
from trainctl.serve.planner import ANSWER
from trainctl.serve.store import RunStore, run_uuid

# the planner composes and asks verl or TRL for their own validation: seconds, more on a busy machine
PLAN_TIMEOUT_S = 600
# a planner process unused this long ends (it holds verl or TRL imported)
PLANNER_IDLE_S = 300
JOB_FILE = "job.json"  # beside a run the server started: its uuid, description and the fields it was created with


class ActionError(TrainctlError):
    """A request that cannot be done as asked: status is the HTTP answer (404: no such job; 409: the job's state
    does not allow it; 422: the request's values cannot be used)."""

    def __init__(self, message: str, status: int = 409, hint: str | None = None, details: list[str] | None = None):
        super().__init__(message, hint=hint, details=details)
        self.status = status


def plan(fields: dict, recipe: str | None, overrides: list[str], root: Path) -> dict:
    """The planner's answer for a job (trainctl.serve.planner), from the server's planner process."""
    return PLANNER.plan({"fields": fields, "recipe": recipe, "overrides": overrides, "root": str(root)})


class Planner:
    """One planner process kept between plans (`python -m trainctl.serve.planner --serve`): the first plan imports
    verl or TRL (seconds of CPU, hundreds of MB), the next ones reuse them. Plans are made one at a time (a burst of
    creates queues here instead of starting a planner each); the process ends after PLANNER_IDLE_S unused, with the
    server, or when it fails or overruns (the next plan starts another)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._errors = None  # the planner's stderr: a file, read back when it fails
        self._idle: threading.Timer | None = None

    def plan(self, request: dict) -> dict:
        with self._lock:
            if self._idle is not None:
                self._idle.cancel()
            try:
                return self._ask(request)
            finally:
                self._idle = threading.Timer(PLANNER_IDLE_S, self.close)
                self._idle.daemon = True
                self._idle.start()

    def _ask(self, request: dict) -> dict:
        import tempfile

        proc = self._proc
        if proc is None or proc.poll() is not None:
            if self._errors is not None:
                self._errors.close()
            self._errors = tempfile.TemporaryFile("w+")  # noqa: SIM115 (kept as long as the process)
            proc = self._proc = subprocess.Popen(
                [sys.executable, "-m", "trainctl.serve.planner", "--serve"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._errors, text=True, start_new_session=True,
            )  # fmt: skip
        self._errors.seek(0)
        self._errors.truncate()
        overran = threading.Event()
        overrun = threading.Timer(PLAN_TIMEOUT_S, lambda: (overran.set(), proc.kill()))
        overrun.start()
        try:
            proc.stdin.write(json.dumps(request) + "\n")
            proc.stdin.flush()
            for line in proc.stdout:  # libraries may print too: the answer is the line that says it is one
                if line.startswith(ANSWER):
                    return json.loads(line[len(ANSWER) :])
        except (OSError, ValueError):
            pass
        finally:
            overrun.cancel()
        code = proc.wait()
        self._proc = None
        self._errors.seek(0)
        tail = self._errors.read().strip().splitlines()[-12:]
        why = f"took over {PLAN_TIMEOUT_S} s" if overran.is_set() else f"exit {code}"
        raise ActionError(f"the planner failed ({why}).", 500, details=tail)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            proc, self._proc = self._proc, None
            if proc is not None and proc.poll() is None:
                proc.stdin.close()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


PLANNER = Planner()


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
    # the request is fine; the job is what cannot start (its plan, or what its launch found): 409, as for a job
    # started already
    if job["problems"]:
        raise ActionError(
            f"job {job['name'] or job['uuid']} has {len(job['problems'])} problem(s); nothing was started.",
            409,
            hint="create it again with the problems fixed (POST /api/jobs shows them)",
            details=[p["message"] for p in job["problems"]],
        )
    run_dir = Path(job["run_dir"])
    try:
        started = start_detached(list(job["args"]), run_dir)
    except ActionError:
        raise
    except TrainctlError as e:
        raise ActionError(e.message, 409, hint=e.hint, details=e.details) from None
    store.drop_pending(uid)
    keep = {k: job[k] for k in ("uuid", "description", "fields", "recipe", "overrides", "args", "created")}
    atomic_write_text(run_dir / JOB_FILE, json.dumps({**keep, "started_by": "trainctl serve"}, indent=2) + "\n")
    return {
        "uuid": job["uuid"],  # `uid` may be its name
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


ACTION_ID = r"^[0-9a-f]{12}$"
# how long the server's shutdown waits for its merges and evals to clean up after Ctrl-C before killing them
STOP_GRACE_S = 10.0


@dataclass
class Action:
    """A background command started by the server (a merge, an eval): what it is and how it ended.

    Its record (logs/serve-KIND-STAMP-ID.json in the run folder, beside its log) says how it ended once it has; a
    server started later reads it there (the action's process ends with the server that started it: it cannot end
    unrecorded and unwatched)."""

    id: str
    kind: str
    run: str
    command: str
    log: Path
    record: Path
    started: float
    proc: subprocess.Popen | None = None  # this server's child; None for one an earlier server started
    pid: int | None = None
    exit_code: int | None = None
    ended: float | None = None
    reason: str | None = None

    def data(self) -> dict:
        from trainctl.serve.reading import last_lines

        if self.exit_code is None and self.reason is None and self.proc is None and not _alive(self.pid, self.started):
            self.reason = "the server that started it stopped before it ended (no exit status was recorded)"
        lines, _ = last_lines(self.log, 40)
        ended = self.exit_code is not None or self.reason is not None
        state = "done" if self.exit_code == 0 else ("failed" if ended else "running")
        return {
            "id": self.id,
            "kind": self.kind,
            "run": self.run,
            "command": self.command,
            "state": state,
            "exit_code": self.exit_code,
            "reason": self.reason,
            "started": self.started,
            "ended": self.ended,
            "log": self.log.name,
            "output": lines,
        }

    def save(self) -> None:
        keep = ("id", "kind", "run", "command", "started", "pid", "exit_code", "ended", "reason")
        record = {k: getattr(self, k) for k in keep} | {"log": self.log.name}
        atomic_write_text(self.record, json.dumps(record, indent=2) + "\n")

    @classmethod
    def load(cls, record: Path) -> Action | None:
        try:
            raw = json.loads(record.read_text())
            return cls(raw["id"], raw["kind"], raw["run"], raw["command"], record.parent / raw["log"], record,
                       raw["started"], None, raw.get("pid"), raw.get("exit_code"), raw.get("ended"),
                       raw.get("reason"))  # fmt: skip
        except (OSError, ValueError, KeyError, TypeError):
            return None


class Actions:
    """The merges and evals this server started, and those earlier servers recorded in the run folders."""

    def __init__(self, store: RunStore):
        self.store = store
        self._all: dict[str, Action] = {}
        self._lock = threading.Lock()
        # every action's process is forked from this one thread, which lives as long as the server: the kernel sends
        # an action its parent-death signal when the *thread* that forked it ends (prctl(2)), and the threads that
        # run FastAPI's routes come and go
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="serve-actions")

    def run(self, kind: str, run: Path, args: list[str]) -> Action:
        """`trainctl ARGS` in the background, its output in the run's logs/serve-KIND-STAMP-ID.log; interrupted
        (SIGINT: it cleans up, as after Ctrl-C) when this server ends, however it ends."""
        from trainctl.launchers.tether import unmarked

        with self._lock:
            busy = [a for a in self.of(run) if a.kind == kind and a.data()["state"] == "running"]
            if busy:
                raise ActionError(f"a {kind} of {run.name} is running already ({busy[0].id}).", 409)
            aid = uuidlib.uuid4().hex[:12]
            stem = run / "logs" / f"serve-{kind}-{time.strftime('%Y%m%d-%H%M%S')}-{aid}"
            stem.parent.mkdir(parents=True, exist_ok=True)
            command = " ".join(_quote(a) for a in ["trainctl", *args])
            action = Action(aid, kind, str(run), command, stem.with_suffix(".log"), stem.with_suffix(".json"),
                            time.time())  # fmt: skip
            argv = [sys.executable, "-m", "trainctl.serve.background", str(os.getpid()), "-m", "trainctl", *args]
            with open(action.log, "w") as out:
                action.proc = self._spawner.submit(
                    subprocess.Popen,
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    # it ends with the server by its parent-death signal, and cleans up as after Ctrl-C; the server's
                    # watchdog (trainctl.launchers.tether) would SIGTERM it half-way through
                    env=unmarked(),
                ).result()
            action.pid = action.proc.pid
            action.save()
            self._all[aid] = action
        threading.Thread(target=self._watch, args=(action,), name=f"serve-action-{aid}", daemon=True).start()
        return action

    def _watch(self, action: Action) -> None:
        """Record how the action ended, the moment it ends."""
        self._ended(action, action.proc.wait())

    @staticmethod
    def _ended(action: Action, code: int) -> None:
        if action.ended is not None:
            return
        action.exit_code, action.ended = code, time.time()
        if code < 0:
            action.reason = f"killed by signal {-code}"
        elif code == 130:
            action.reason = "interrupted (Ctrl-C, or the server that started it stopped)"
        with contextlib.suppress(OSError):
            action.save()

    def get(self, aid: str) -> Action | None:
        found = self._all.get(aid)
        if found is not None or not re.match(ACTION_ID, aid):
            return found
        for _, run in self.store.folders():
            for record in (run / "logs").glob(f"serve-*-{aid}.json"):
                return Action.load(record)
        return None

    def of(self, run: Path) -> list[Action]:
        """A run's actions, newest first: this server's, and those recorded by earlier ones."""
        mine = {a.id: a for a in self._all.values() if a.run == str(run)}
        for record in (Path(run) / "logs").glob("serve-*-*.json"):
            aid = record.stem.rsplit("-", 1)[-1]
            if aid not in mine and (earlier := Action.load(record)) is not None:
                mine[aid] = earlier
        return sorted(mine.values(), key=lambda a: a.started, reverse=True)

    def stop_all(self) -> None:
        """The server's own children end with it, interrupted as Ctrl-C interrupts them (a merge removes its
        half-written folder); SIGKILL for one that has not ended after STOP_GRACE_S."""
        import signal

        running = [a for a in self._all.values() if a.proc is not None and a.proc.poll() is None]
        for a in running:
            with contextlib.suppress(OSError):
                os.killpg(a.proc.pid, signal.SIGINT)
        deadline = time.monotonic() + STOP_GRACE_S
        for a in running:
            try:
                a.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    os.killpg(a.proc.pid, signal.SIGKILL)
                a.proc.wait()
            self._ended(a, a.proc.returncode)  # recorded before the server exits (its watchers are daemons)
        self._spawner.shutdown(wait=False)
        PLANNER.close()


def _alive(pid: int | None, started: float) -> bool:
    """The action an earlier server recorded still runs (another server over the same runs, still up)."""
    import psutil

    try:
        proc = psutil.Process(pid) if pid else None
        return proc is not None and proc.status() != psutil.STATUS_ZOMBIE and proc.create_time() <= started + 5
    except psutil.Error:
        return False


def checkpoint_path(run: Path, step: int) -> Path:
    from trainctl.ckpt.layout import CheckpointError, list_checkpoints

    try:
        listing = list_checkpoints(run)
    except CheckpointError as e:  # none yet: no checkpoint at that step either
        raise ActionError(f"{run.name} has no checkpoint at step {step}: {e.message}", 404, hint=e.hint) from None
    found = next((c for c in listing.checkpoints if c.step == step), None)
    if found is None:
        steps = [c.step for c in listing.checkpoints]
        raise ActionError(f"{run.name} has no checkpoint at step {step}.", 404, hint=f"steps: {steps}")
    if found.incomplete:
        raise ActionError(f"the checkpoint at step {step} is incomplete ({found.incomplete}).", 409)
    return found.path


def prune_plan(run: Path, keep_last: int, keep_best: str | None, mode: str | None):
    from trainctl.ckpt.layout import CheckpointError, list_checkpoints
    from trainctl.ckpt.select import plan_prune

    try:
        list_checkpoints(run)
    except CheckpointError as e:  # the run's state, not the request: nothing to prune yet
        raise ActionError(e.message, 409, hint=e.hint, details=e.details) from None
    try:
        return plan_prune(run, keep_last, keep_best, mode)
    except CheckpointError as e:  # what the request asks cannot be done (a metric the run does not log)
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
