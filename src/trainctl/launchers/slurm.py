"""hardware.launcher=slurm: the run is a batch job on a Slurm cluster.

trainctl writes the job's script into the run folder (runs/NAME/slurm.sbatch: `sbatch` submits it again, as
command.sh re-runs a local launch) and submits it. The script places the trainer on its nodes as the trainer wants:
  PPO family  a Ray head on the first node and a Ray worker on each other one, then verl's main_ppo on the first
              node, joining them once every node is in (verl's examples/slurm/ray_on_slurm.slurm, waiting as
              NeMo-RL's ray.sub does); each node's Ray ports follow hardware.slurm.ray_port, so that nodes sharing
              a host do not collide
  SFT, TRL    torchrun on every node, one agent a node, meeting at a c10d rendezvous on the first node
              (hardware.slurm.rdzv_port), which the script hands them in torchrun's PET_RDZV_ENDPOINT
The job writes its output into the attempt's log in the run folder (the cluster's shared filesystem, where trainctl
reads it: the live view, `runs logs`) and its exit code beside it (logs/attempt-N.exit) when it ends.

`train` follows the job to its end (Ctrl-C cancels it); --detach returns once sbatch has answered. Where a job stands
is Slurm's answer: one `scontrol show job` for every job it knows (running, queued, or ended lately; no accounting
database needed), then the exit-code file once Slurm has forgotten the job. `runs stop` cancels it: SIGTERM to every
step (the trainer stops, `ray start` stops its own daemons), then after the grace `scancel` (SIGTERM, then SIGKILL
after the cluster's KillWait), and what the job left on this machine is stopped. Every
Slurm command goes through slurm().
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from trainctl.errors import EXIT_INTERRUPTED, EXIT_RUN_FAILED, Problem, TrainctlError
from trainctl.launchers import register
from trainctl.launchers.base import STOP_GRACE_SECONDS, Ended, Job, Launcher, Status
from trainctl.launchers.local import pid_alive
from trainctl.launchers.slurm_cluster import (
    INSTALL_HINT,
    POLL_SECONDS,
    QUEUED,
    RUNNING,
    JobState,
    cancel,
    gpus,
    job,
    minutes,
    missing_commands,
    partition,
    partition_nodes,
    slurm,
)

SCRIPT = "slurm.sbatch"
# how long the first node waits for every node's Ray to join before it gives up
JOIN_SECONDS = 300
# Ctrl-C on a followed job: the steps' grace before scancel
CTRL_C_GRACE = 15.0


def recorded_exit(attempt: dict) -> int | None:
    """The exit code the job wrote beside its log when it ended (logs/attempt-N.exit), if it did."""
    with contextlib.suppress(OSError, ValueError, TypeError):
        return int(Path(attempt["exit_file"]).read_text().strip())
    return None


# -- the job's script -----------------------------------------------------------------------------------------


def torchrun_argv(argv: list[str]) -> bool:
    """Whether the trainer is torchrun (one agent a node) rather than a driver that joins Ray."""
    return Path(argv[0]).name == "torchrun" or argv[1:3] == ["-m", "torch.distributed.run"]


# the first node waits for every node's Ray (`ray.nodes()` through the job's own Ray address)
_WAIT_FOR_NODES = """
import os, sys, time
import ray
want, deadline = int(sys.argv[1]), time.time() + float(sys.argv[2])
while True:
    try:
        ray.init(logging_level="ERROR", log_to_driver=False)
        break
    except Exception as e:
        if time.time() > deadline:
            sys.exit(f"trainctl: no Ray head at {os.environ['RAY_ADDRESS']}: {e}")
        time.sleep(2)
while len(alive := [n for n in ray.nodes() if n["Alive"]]) < want:
    if time.time() > deadline:
        sys.exit(f"trainctl: {len(alive)} of {want} nodes joined Ray within {sys.argv[2]} s")
    time.sleep(2)
print(f"trainctl: Ray is up on {len(alive)} node(s): " + ", ".join(n["NodeID"] for n in alive), flush=True)
""".strip()


# each node's agent says where it starts, then becomes the trainer
_ON_EACH_NODE = 'echo "trainctl: node $SLURMD_NODENAME (node rank $SLURM_NODEID) starts $(basename "$1")"; exec "$@"'


def _word(text: str) -> str:
    """A path as one word of an #SBATCH line (sbatch reads double quotes there)."""
    return f'"{text}"' if any(c.isspace() for c in text) else text


def sbatch_options(hw: dict, run_name: str, log: Path) -> list[str]:
    s = hw.get("slurm") or {}
    opts = [f"--job-name=trainctl-{run_name}", f"--nodes={hw['nnodes']}", "--ntasks-per-node=1"]
    # the attempt's log in the run folder ('%' is sbatch's pattern character)
    opts += [f"--output={_word(str(log).replace('%', '%%'))}", "--open-mode=append", f"--chdir={_word(os.getcwd())}"]
    # an attempt runs once: Slurm requeues a batch job whose node fails (JobRequeue=1, its default), which would wait
    # for a node that may never come back, then start the attempt over behind trainctl's back; trainctl says what
    # happened instead, and `train --resume` continues from the last whole checkpoint
    opts.append("--no-requeue")
    for key, flag in (("partition", "partition"), ("account", "account"), ("qos", "qos"), ("mem", "mem")):
        if s.get(key):
            opts.append(f"--{flag}={s[key]}")
    if s.get("time") is not None:
        opts.append(f"--time={s['time']}")
    if s.get("cpus_per_node"):
        opts.append(f"--cpus-per-task={s['cpus_per_node']}")
    if hw.get("device") == "cuda":
        opts.append(f"--gpus-per-node={hw['gpus_per_node']}")
    return [*opts, *(str(a) for a in s.get("extra_args") or [])]


def script(job: Job, hw: dict, log: Path, exit_path: Path, args: list[str]) -> str:
    """The batch script of one attempt: its #SBATCH options, the run's environment (no secret: those come from
    the environment sbatch runs in), the nodes' wiring, the trainer."""
    from trainctl.scratch import batch_job_lines
    from trainctl.secrets import Redactor, is_secret_name

    redact = Redactor()
    s = hw.get("slurm") or {}
    per_node = torchrun_argv(job.argv)
    how = (
        "torchrun on every node (one agent a node), meeting at a c10d rendezvous on the first node"
        if per_node
        else "a Ray head on the first node and a Ray worker on every other one (verl's "
        "examples/slurm/ray_on_slurm.slurm), then the trainer on the first node once every node has joined"
    )
    lines = [
        "#!/bin/bash",
        f"# The Slurm job of run {job.run_name}, as trainctl submitted it; `sbatch {SCRIPT}` submits it again.",
        f"# trainctl command: trainctl train {' '.join(shlex.quote(redact.text(a)) for a in args)}",
        f"# On {hw['nnodes']} node(s): {how}.",
        "# Secrets (HF_TOKEN, WANDB_API_KEY, ...) come from the environment sbatch runs in, never from this file.",
        *(f"#SBATCH {o}" for o in sbatch_options(hw, job.run_name, log)),
        *(str(line) for line in s.get("setup") or []),
        "set -uo pipefail",
        f"exit_file={shlex.quote(str(exit_path))}",
        *batch_job_lines(job.env),
        """trap 'echo $? > "$exit_file"; remove_job_tmp' EXIT""",
        *(f"export {k}={shlex.quote(v)}" for k, v in job.added_env.items() if not is_secret_name(k)),
        'nodes=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))',
        "head=${nodes[0]}",
        "head_ip=$(srun --nodes=1 --ntasks=1 -w \"$head\" hostname --ip-address | awk '{print $1}')",
        'echo "trainctl: Slurm job $SLURM_JOB_ID on ${#nodes[@]} node(s): ${nodes[*]}; the first: $head ($head_ip)"',
    ]
    trainer = shlex.join(job.argv)
    if per_node:
        lines += [
            f'export PET_RDZV_ENDPOINT="$head_ip:{s.get("rdzv_port", 29400)}" PET_RDZV_ID="$SLURM_JOB_ID"',
            f'srun --nodes="${{#nodes[@]}}" --ntasks-per-node=1 bash -c {shlex.quote(_ON_EACH_NODE)} _ {trainer}',
        ]
    else:
        ray = shlex.quote(str(Path(sys.executable).parent / "ray"))
        flags = "--block --disable-usage-stats"
        cpus = hw.get("ray_num_cpus")
        flags += (
            f" --num-cpus={cpus}" if cpus else (" --num-cpus=$SLURM_CPUS_PER_TASK" if s.get("cpus_per_node") else "")
        )
        flags += f" --num-gpus={hw['gpus_per_node']}" if hw.get("device") == "cuda" else ""
        port = int(s.get("ray_port", 6379))
        lines += [
            f"ray_port={port}",
            'export RAY_ADDRESS="$head_ip:$ray_port"',
            "# `ray start --block` stops its daemons on SIGTERM at once: by default it first drains the node for 30 s",
            "# (for Ray Serve), past `runs stop`'s grace, and scancel's SIGKILL then left the daemons running",
            "export RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S=0",
            "# node i's Ray ports: a block of 200 above the head's (nodes that share a host do not collide)",
            "ray_ports() {",
            "  local b=$((ray_port + 1 + 200 * $1))",
            '  echo "--node-manager-port=$b --object-manager-port=$((b + 1))'
            " --dashboard-agent-listen-port=$((b + 2)) --dashboard-agent-grpc-port=$((b + 3))"
            " --runtime-env-agent-port=$((b + 4)) --metrics-export-port=$((b + 5))"
            ' --min-worker-port=$((b + 10)) --max-worker-port=$((b + 199))"',
            "}",
            f'srun --nodes=1 --ntasks=1 -w "$head" {ray} start --head --node-ip-address="$head_ip" --port=$ray_port'
            f" --ray-client-server-port=$((ray_port + 7)) --include-dashboard=false {flags} $(ray_ports 0) &",
            f"for ((t = 0; t < {JOIN_SECONDS}; t++)); do (exec 3<>/dev/tcp/$head_ip/$ray_port) 2>/dev/null && break;"
            " sleep 1; done",
            "for ((i = 1; i < ${#nodes[@]}; i++)); do",
            f'  srun --nodes=1 --ntasks=1 -w "${{nodes[$i]}}" {ray} start --address="$RAY_ADDRESS" {flags}'
            " $(ray_ports $i) &",
            "done",
            f"{shlex.quote(sys.executable)} -c {shlex.quote(_WAIT_FOR_NODES)} ${{#nodes[@]}} {JOIN_SECONDS} || exit 1",
            f'srun --overlap --nodes=1 --ntasks=1 -w "$head" {trainer}',
        ]
    lines += ["code=$?", 'echo "trainctl: the trainer exited with code $code"', "exit $code", ""]
    return "\n".join(lines)


# -- the launcher -----------------------------------------------------------------------------------------------

STOP_FILE = "stop-requested"
REASONS = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "terminal closed"}


@register("slurm")
class Slurm(Launcher):
    description = "a batch job on a Slurm cluster (hardware.slurm: partition, account, time, ...)"
    # the PPO family joins the Ray cluster the job starts on its nodes; torchrun trainers meet at a rendezvous
    ray = "join"
    torchrun = "rendezvous"
    queues = True

    def config_problems(self, hw, launching: bool) -> list[Problem]:
        problems = []
        if hw.slurm.time is not None:
            try:
                minutes(hw.slurm.time)
            except ValueError:
                problems.append(
                    Problem(
                        f"hardware.slurm.time = {hw.slurm.time!r} is not a time Slurm reads.",
                        key="hardware.slurm.time",
                        hint="MINUTES, HH:MM:SS or DAYS-HH:MM:SS: hardware.slurm.time=04:00:00",
                    )
                )
        for arg in hw.slurm.extra_args:
            if not str(arg).startswith("-"):
                problems.append(
                    Problem(
                        f"hardware.slurm.extra_args: {arg!r} is not an sbatch option (they start with -).",
                        key="hardware.slurm.extra_args",
                        hint="hardware.slurm.extra_args=[--exclusive,--constraint=a100]",
                    )
                )
        return problems

    def preflight(self, plan: Any) -> list[Problem]:
        """What the cluster must offer before sbatch: Slurm's commands, the partition, its nodes and limits; and
        no earlier attempt of the run still queued or running."""
        _, problems = check_cluster(plan.cfg.hardware)
        return problems or _still_running(plan.run_dir)

    # -- running ---------------------------------------------------------------------------------------------

    def start(self, job: Job, run: Any, on_attempt=None) -> Ended:
        import yaml

        from trainctl.launchers.tree import MARK_VAR, new_mark

        begin = time.monotonic()
        status = run.status()
        n = len(status["attempts"]) + 1
        hw = (yaml.safe_load((run.path / "trainctl.yaml").read_text()) or {})["hardware"]
        log, exit_path = run.path / "logs" / f"attempt-{n}.log", run.path / "logs" / f"attempt-{n}.exit"
        for stale in (exit_path, run.path / STOP_FILE):
            stale.unlink(missing_ok=True)
        path = run.path / SCRIPT
        path.write_text(script(job, hw, log, exit_path, status.get("args") or []))
        path.chmod(0o755)
        mark = new_mark()  # this host's leftovers of the job are found by it (a test cluster on one machine)
        out = slurm("sbatch", "--parsable", str(path), env={**job.env, MARK_VAR: mark})
        job_id = out.strip().split(";")[0]
        attempt = run.start_attempt(
            self.name, job_id=job_id, script=SCRIPT, exit_file=str(exit_path), mark=mark, steps_total=job.steps_total
        )
        if job.detach:
            run.update_attempt(state="submitted")
            run.set_state("submitted")
            return Ended("submitted", 0, job_id=job_id)
        with _catching() as signals:  # from the moment the run says who follows it (runs stop signals that)
            run.set_live()
            if on_attempt:
                on_attempt(run, attempt)
            if job.echo:
                job.echo.write(f"trainctl: Slurm job {job_id}, its script {path}\n")
            found = _follow(job_id, run, attempt, job, signals)
        seconds = time.monotonic() - begin
        reason = None
        if signals:
            state, code = "interrupted", EXIT_INTERRUPTED
            reason = _stop_request(run) or REASONS.get(signals[0], f"signal {signals[0]}")
        elif found is not None and found.state == "CANCELLED":
            state, code, reason = "interrupted", EXIT_INTERRUPTED, _stop_request(run) or "cancelled in Slurm"
        else:
            exit_code = recorded_exit(attempt)
            if exit_code is None and found is not None:
                exit_code = found.exit_code
            state = "finished" if exit_code == 0 and (found is None or found.state == "COMPLETED") else "failed"
            code = 0 if state == "finished" else (exit_code or EXIT_RUN_FAILED)
            if found is not None and found.state == "TIMEOUT":
                reason = "the job reached its time limit (hardware.slurm.time)"
        _sweep(attempt)
        extra = {"reason": reason} if reason else {}
        run.finish_attempt(state, code, job_state=found.state if found else None, seconds=round(seconds, 2), **extra)
        tail = log.read_text(errors="replace").splitlines()[-400:] if log.is_file() else []
        verdict = job_verdict(found) if state == "failed" else None
        return Ended(state, code, seconds=seconds, tail=tail, reason=reason, job_id=job_id, verdict=verdict)

    # -- status ----------------------------------------------------------------------------------------------

    def live_status(self, attempt: dict, live: dict, query: bool = True) -> Status:
        job_id = attempt.get("job_id")
        if not job_id:
            return Status("killed", "trainctl was stopped before it submitted the job")
        if not query:
            following = _following(live)
            return Status("running" if following else "unknown", f"Slurm job {job_id}")
        try:
            found = job(job_id)
        except TrainctlError as e:
            return Status("unknown", f"Slurm job {job_id}: {e.message}")
        if found is None:
            return Status("unknown", f"Slurm job {job_id}: Slurm no longer knows it")
        if found.state in QUEUED:
            return Status("queued", f"Slurm job {job_id}: {found.state.lower()} ({found.reason})")
        if found.state in RUNNING:
            return Status("running", f"Slurm job {job_id} on {found.nodes}")
        if found.state == "COMPLETED":
            return Status("done", f"Slurm job {job_id}", 0, ended=found.end)
        if found.state == "CANCELLED":
            return Status("stopped", f"Slurm job {job_id} was cancelled", ended=found.end)
        detail = f"Slurm job {job_id}: {found.state}, exit {found.exit_code}"
        return Status("failed", detail, found.exit_code, ended=found.end)

    def status(self, run_state: str, attempt: dict, live: dict, query: bool = True) -> Status:
        found = super().status(run_state, attempt, live, query)
        if found.status == "unknown" and query and attempt.get("job_id"):
            # Slurm forgets an ended job after its MinJobAge: the exit code the job wrote in the run folder says
            code = attempt.get("exit_code")
            code = recorded_exit(attempt) if code is None else code
            if code is not None:
                ended = None
                with contextlib.suppress(OSError, KeyError):
                    ended = Path(attempt["exit_file"]).stat().st_mtime
                return Status("done" if code == 0 else "failed", f"Slurm job {attempt['job_id']}", code, ended)
        return found

    # -- stopping --------------------------------------------------------------------------------------------

    def stop(self, run: Any, grace: float = STOP_GRACE_SECONDS) -> str:
        status = run.status()
        attempt = status["attempts"][-1] if status.get("attempts") else {}
        job_id = attempt.get("job_id")
        if not job_id or status.get("state") not in ("running", "submitted"):
            raise TrainctlError(
                f"{run.path.name} is not running (state: {status.get('state')}).",
                hint=f"trainctl runs show {run.path}",
            )
        live = status.get("live") or {}
        (run.path / STOP_FILE).write_text(f"{os.getpid()} {time.time()} {grace}\n")
        if _following(live):
            # the trainctl that follows the job cancels it (the same steps, the same grace) and records its end
            with contextlib.suppress(ProcessLookupError):
                os.kill(live["pid"], signal.SIGINT)
            deadline = time.monotonic() + grace + 90
            while time.monotonic() < deadline and pid_alive(live["pid"], live.get("pid_started")):
                time.sleep(0.25)
            if not pid_alive(live["pid"], live.get("pid_started")):
                return f"stopped {run.path.name} (Slurm job {job_id})"
        swept: list[int] = []
        found = cancel(job_id, grace, lambda: swept.append(_sweep(attempt)))
        left = sum(swept) + _sweep(attempt)
        if run.status().get("state") in ("running", "submitted"):
            run.finish_attempt(
                "interrupted",
                EXIT_INTERRUPTED,
                job_state=found.state if found else None,
                reason=_stop_request(run) or "stopped by trainctl runs stop",
                seconds=_since(attempt.get("started")),
            )
        extra = f"; {left} leftover processes here stopped" if left else ""
        if found is not None and not found.ended:
            extra += f"; Slurm still says {found.state}"
        return f"stopped {run.path.name} (Slurm job {job_id}){extra}"


def check_cluster(hw) -> tuple[str, list[Problem]]:
    """What the partition offers, in a line (for doctor), and what keeps it from hosting the run: Slurm's commands
    missing, no such partition, a partition down, more nodes or time than it allows, nodes without the GPUs (or
    CPUs) the run puts on each."""
    from trainctl.launchers.capacity import Node, describe, problems

    missing = missing_commands()
    if missing:
        return "", [Problem(f"Slurm's commands are not on the PATH: {', '.join(missing)}.", hint=INSTALL_HINT)]
    try:
        part = partition(hw.slurm.partition)
        nodes = partition_nodes(part)
    except TrainctlError as e:
        return "", [Problem(e.message, key="hardware.slurm.partition", hint=e.hint)]
    name = part.get("PartitionName", "?")
    out = []
    if part.get("State", "UP") != "UP":
        out.append(
            Problem(
                f"Slurm partition {name} is {part.get('State')}: the job would wait until it is up.",
                key="hardware.slurm.partition",
                hint="sinfo shows the partitions that are up",
            )
        )
    most = part.get("MaxNodes", "UNLIMITED")
    if most.isdigit() and hw.nnodes > int(most):
        out.append(
            Problem(
                f"hardware.nnodes = {hw.nnodes}: Slurm partition {name} takes at most {most} node(s) a job "
                f"(MaxNodes={most}).",
                key="hardware.nnodes",
                hint=f"hardware.nnodes={most}, or another partition (sinfo lists them)",
            )
        )
    limit = minutes(part.get("MaxTime", "UNLIMITED"))
    asked = minutes(hw.slurm.time) if hw.slurm.time is not None else None
    if limit is not None and asked is not None and asked > limit:
        out.append(
            Problem(
                f"hardware.slurm.time = {hw.slurm.time}: Slurm partition {name} allows a job at most "
                f"{part.get('MaxTime')} ({asked:g} > {limit:g} minutes).",
                key="hardware.slurm.time",
                hint=f"hardware.slurm.time={part.get('MaxTime')}",
            )
        )
    usable = [n for n in nodes if not any(s in n.get("State", "") for s in ("DOWN", "DRAIN", "FAIL"))]
    found = [Node(n.get("NodeName", "?"), int(n.get("CPUTot", 0) or 0), gpus(n)) for n in usable]
    capacity = problems(hw, found, f"Slurm partition {name}", cpus=hw.slurm.cpus_per_node)
    said = {p.key for p in out}
    out += [p for p in capacity if p.key not in said]  # MaxNodes said it already
    summary = f"partition {name}: {describe(found)} up; MaxNodes={most}, MaxTime={part.get('MaxTime')}"
    return summary, out


def _since(started: str | None) -> float | None:
    """Seconds since an attempt's start as run.json writes it (2026-11-27T15:06:12+0000)."""
    from datetime import datetime

    try:
        return round(time.time() - datetime.strptime(str(started), "%Y-%m-%dT%H:%M:%S%z").timestamp(), 2)
    except ValueError:
        return None


def _following(live: dict) -> bool:
    """A trainctl on this machine follows the job (its supervisor record is alive)."""
    import socket

    return (
        bool(live) and live.get("host") == socket.gethostname() and pid_alive(live.get("pid"), live.get("pid_started"))
    )


def _still_running(run_dir: Path) -> list[Problem]:
    """An earlier attempt of the run that Slurm still runs or queues: a second one would write the same folder."""
    import json

    try:
        attempts = json.loads((Path(run_dir) / "run.json").read_text()).get("attempts") or []
    except (OSError, ValueError):
        return []
    last = attempts[-1] if attempts else {}
    if last.get("launcher") != "slurm" or not last.get("job_id") or last.get("ended"):
        return []
    with contextlib.suppress(TrainctlError):
        found = job(last["job_id"], fresh=True)
        if found is not None and not found.ended:
            return [
                Problem(
                    f"{Path(run_dir).name} still runs as Slurm job {last['job_id']} ({found.state.lower()}).",
                    hint=f"stop it first: trainctl runs stop {run_dir}",
                )
            ]
    return []


@contextlib.contextmanager
def _catching():
    """SIGINT, SIGTERM and SIGHUP noted in a list instead of ending trainctl (in the main thread), for the block."""
    signals: list[int] = []
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        for sig in REASONS:
            handlers[sig] = signal.signal(sig, lambda s, f: signals.append(s))
    try:
        yield signals
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def _follow(job_id: str, run: Any, attempt: dict, job_: Job, signals: list[int]) -> JobState | None:
    """Echo the job's log as it grows and keep the heartbeat until the job ends; a signal in `signals` (Ctrl-C,
    runs stop) cancels it. Returns the job's last state."""
    log = run.log_path(attempt)
    offset, asked, found = 0, 0.0, None
    while not signals:
        offset = _echo(log, offset, job_.echo)
        with contextlib.suppress(OSError, ValueError):
            run.beat()
        if time.monotonic() - asked >= POLL_SECONDS:
            asked = time.monotonic()
            with contextlib.suppress(TrainctlError):  # a busy slurmctld: ask again
                found = job(job_id, fresh=True)
                if found is None or found.ended:
                    break
        time.sleep(0.25)
    if signals:
        found = cancel(job_id, _requested_grace(run) or CTRL_C_GRACE, lambda: _sweep(attempt))
    time.sleep(1.0)  # the last lines slurmstepd writes
    _echo(log, offset, job_.echo)
    return found


# Slurm's job states that say why a job ended, beyond its exit code: (what happened, what to do, in a few words)
_JOB_STATES = {
    "NODE_FAIL": (
        "Slurm ended the job: a node it ran on failed (NODE_FAIL{nodes})",
        "`sinfo -R` says why the node is down; resume on the nodes that are up",
        "a Slurm node failed",
    ),
    "BOOT_FAIL": (
        "Slurm could not boot a node for the job (BOOT_FAIL{nodes})",
        "`sinfo -R` says why; resume when the partition has nodes",
        "a Slurm node did not boot",
    ),
    "OUT_OF_MEMORY": (
        "Slurm ended the job: it went beyond its memory (OUT_OF_MEMORY{nodes})",
        "raise hardware.slurm.mem, or lower the run's memory (smaller batches, shorter responses, parameter offload)",
        "out of memory in Slurm",
    ),
    "PREEMPTED": (
        "Slurm preempted the job for another (PREEMPTED{nodes})",
        "resume it; a QoS that is not preempted: hardware.slurm.qos=...",
        "preempted by Slurm",
    ),
}


def job_verdict(found: JobState | None) -> tuple[str, str, str] | None:
    """Why Slurm ended a failed job, when its state says more than its exit code."""
    if found is None or found.state not in _JOB_STATES:
        return None
    what, hint, cause = _JOB_STATES[found.state]
    return what.format(nodes=f", on {found.nodes}" if found.nodes else ""), hint, cause


def _echo(log: Path, offset: int, echo) -> int:
    if echo is None:
        return offset
    with contextlib.suppress(OSError):
        with open(log, "rb") as f:
            f.seek(offset)
            data = f.read()
        if data:
            echo.write(data.decode("utf-8", errors="replace"))
            echo.flush()
            return offset + len(data)
    return offset


def _requested_grace(run: Any) -> float | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        return float((run.path / STOP_FILE).read_text().split()[2])
    return None


def _stop_request(run: Any) -> str | None:
    path = run.path / STOP_FILE
    if not path.is_file():
        return None
    path.unlink(missing_ok=True)
    return "stopped by trainctl runs stop"


def _sweep(attempt: dict) -> int:
    """Stop what the job left on this machine (found by the attempt's mark): nothing on a cluster's login node,
    Ray's daemons on a one-machine cluster whose process tracking they escaped."""
    from trainctl.launchers.tree import stop_marked

    return stop_marked(attempt["mark"]) if attempt.get("mark") else 0
