"""What a running trainer depends on, watched from its supervisor, and the verdict when one of them fails.

A verl run is a dozen processes: the trainer (main_ppo), Ray's GCS and raylet, verl's actors (the TaskRunner, the
training WorkerDict, agent-loop workers) and a rollout engine (vLLM's EngineCore, or trainctl's HFRolloutServer).
When one dies, verl does not always notice: a trainer that awaits a dead engine waits forever, and one that does
notice may blame something else (verl's "Sync replay buffer selected terminal groups with no materializable
trajectories" for a killed EngineCore). The supervisor samples the trainer's processes every half second; a
process it knows by its title (ROLES) that dies, or stays stopped, becomes a Fault:

- died      the trainer has `run.watch.dead` seconds to end by itself (verl raises ActorDiedError within a few);
            if it is still running then, trainctl ends it. Either way the verdict names what died, and when.
- stopped   (SIGSTOP, a frozen cgroup: a hung process that Ray still sees as alive) after `run.watch.stopped` s.
- stall     no new training step for `run.watch.stall` seconds after the first (a hang nothing else explains).

Whether the kernel's OOM killer did it is read from the dead process's memory cgroup (its oom_kill count, v1 or
v2, sampled while it lived), and what it held from its last sampled resident memory.
"""

from __future__ import annotations

import contextlib
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

# the processes a verl run cannot go on without, by their title (Ray's actors set `ray::Class.method`)
ROLES: tuple[tuple[re.Pattern, str, str], ...] = (  # (title, what it is, its name in the processes' list)
    (re.compile(r"^VLLM::EngineCore"), "vLLM's engine", "VLLM::EngineCore"),
    (re.compile(r"^ray::vLLMHttpServer"), "verl's vLLM server", "vLLMHttpServer"),
    (re.compile(r"^ray::HFRolloutServer"), "trainctl's hf rollout server", "HFRolloutServer"),
    (re.compile(r"^ray::WorkerDict"), "verl's training worker", "WorkerDict"),
    (re.compile(r"^ray::TaskRunner"), "verl's task runner", "TaskRunner"),
    (re.compile(r"^ray::AgentLoopWorker"), "verl's agent-loop worker", "AgentLoopWorker"),
    (re.compile(r"^ray::RewardLoopWorker"), "verl's reward worker", "RewardLoopWorker"),
    # verl's TaskRunner closes its transfer queue (these two actors) in a `finally`: they die with every failure of
    # the run, before the trainer prints it, and at every end; blamed only when the trainer names them (ENDED_BY_RUN)
    (re.compile(r"^ray::TransferQueueController"), "verl's transfer queue", "TransferQueueController"),
    (re.compile(r"^ray::SimpleStorageUnit"), "verl's transfer queue storage", "SimpleStorageUnit"),
    (re.compile(r"/raylet/raylet\b"), "Ray's raylet (this node's Ray)", "raylet"),
    (re.compile(r"/gcs/gcs_server\b"), "Ray's GCS server (the cluster's head)", "gcs_server"),
)

# what lowers a run's memory (verl's keys: the runs with processes to watch are verl's), for an OOM killer's verdict
MEMORY_SETTINGS = (
    "smaller batches (data.train_batch_size, actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu), shorter "
    "responses (data.max_response_length), parameter offload (actor_rollout_ref.actor.fsdp_config.param_offload=true), "
    "or a smaller rollout memory share (actor_rollout_ref.rollout.gpu_memory_utilization)"
)


# processes the trainer itself ends when it fails (before its error is printed) or finishes
ENDED_BY_RUN = frozenset({"TransferQueueController", "SimpleStorageUnit"})
# this many of the run's processes gone in one sample is the trainer stopping its Ray, at its end or after its error
TOGETHER = 3


def role_of(cmdline: list[str]) -> tuple[str, str] | None:
    """(what the process is, its name), for a process the run depends on."""
    text = " ".join(cmdline)
    return next(((what, name) for pattern, what, name in ROLES if pattern.search(text)), None)


def _rank(name: str) -> int:
    return next((i for i, (_, _, known) in enumerate(ROLES) if known == name), len(ROLES))


def _memory_cgroup(pid: int) -> Path | None:
    """The folder of the process's memory cgroup (v1's memory controller, or v2's unified hierarchy)."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        num, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            folder = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
            if (folder / "memory.oom_control").is_file():
                return folder
        if num == "0" and controllers == "":
            folder = Path("/sys/fs/cgroup") / path.lstrip("/")
            if (folder / "memory.events").is_file():
                return folder
    return None


def oom_kills(cgroup: Path | None) -> int | None:
    """How many processes the kernel's OOM killer has killed in this memory cgroup, where it says."""
    if cgroup is None:
        return None
    for name in ("memory.oom_control", "memory.events"):
        with contextlib.suppress(OSError, ValueError):
            for line in (cgroup / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    return None


@dataclass
class Watched:
    pid: int
    what: str
    name: str
    created: float
    rss: int = 0
    cgroup: Path | None = None
    oom_kills: int | None = None
    stopped_since: float | None = None


@dataclass
class Fault:
    """What went wrong, for the run's verdict."""

    kind: str  # died | stopped | stall
    what: str
    name: str  # the process's name (HFRolloutServer), or "" for a stall
    pid: int | None
    at: float  # wall-clock time it was seen
    rss: int | None = None
    oom: bool | None = None  # killed by the kernel's OOM killer; None: its memory cgroup does not say
    rank: int = 0  # its place in ROLES: of processes seen gone together, the lowest is blamed
    together: bool = False  # gone with TOGETHER or more others at once: the trainer stopping its Ray (an end)
    ended_by_trainctl: bool = False  # the trainer was still waiting when its time was up

    def verdict(self) -> str:
        when = time.strftime("%H:%M:%S", time.localtime(self.at))
        who = f"{self.what} ({self.name}, PID {self.pid})"
        if self.kind == "stall":
            text = f"{self.what} (the last at {when})"
        elif self.kind == "stopped":
            text = f"{who} was stopped (SIGSTOP or frozen) since {when}: the run could not go on"
        elif self.oom:
            held = f", holding {self.rss / 2**30:.1f} GiB" if self.rss else ""
            text = f"the kernel's OOM killer killed {who} at {when}{held}"
        else:
            held = f", {self.rss / 2**20:.0f} MiB resident" if self.rss else ""
            text = f"{who} died at {when}{held}"
        if self.ended_by_trainctl:
            text += "; the trainer was still waiting for it, so trainctl ended the run"
        return text

    def cause(self) -> str:
        """The verdict in a few words, for `runs ls`."""
        if self.kind == "stall":
            return self.what
        if self.oom:
            return f"{self.what} killed by the OOM killer"
        return f"{self.what} {self.kind}"

    def hint(self) -> str:
        if self.oom:
            return f"lower the run's memory: {MEMORY_SETTINGS}"
        if self.kind == "stall":
            return "the log shows where it stopped; a longer wait: run.watch.stall=SECONDS (null: never)"
        if self.kind == "stopped":
            return "whatever stopped it (a debugger, a frozen container) must let it go; or raise run.watch.stopped"
        if self.oom is False:
            return (
                "not the kernel's OOM killer (its memory cgroup counted no OOM kill): a signal from outside, or a "
                "crash (its last lines are in the log)"
            )
        return "if nothing killed it, look for memory: `dmesg | grep -i oom` and the log"


@dataclass
class Vitals:
    """Samples the trainer's processes (sample(), from the supervisor's watcher thread) and says when the run
    should be ended (due(), from its main loop)."""

    dead: float = 20.0
    stopped: float = 30.0
    stall: float | None = None
    progress: Path | None = None  # the attempt's metrics file: one line a step
    watched: dict[int, Watched] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)
    trainer: Watched | None = None  # the trainer process itself: its memory, and its cgroup's OOM kills

    def sample(self, procs: list[psutil.Process], trainer: psutil.Process | None = None) -> None:
        now = time.time()
        if trainer is not None:
            self._sample_trainer(trainer)
        alive = set()
        for p in procs:
            try:
                with p.oneshot():
                    status, created = p.status(), p.create_time()
                    if status == psutil.STATUS_ZOMBIE:
                        continue
                    known = self.watched.get(p.pid)
                    if known is None or abs(known.created - created) > 1.0:
                        role = role_of(p.cmdline())
                        if role is None:
                            continue
                        cgroup = _memory_cgroup(p.pid)
                        known = self.watched[p.pid] = Watched(p.pid, *role, created, cgroup=cgroup)
                    if not _dying(p.pid):
                        known.rss = p.memory_info().rss
                        known.oom_kills = oom_kills(known.cgroup)
            except psutil.Error:
                continue
            alive.add(p.pid)
            if status == psutil.STATUS_STOPPED:
                known.stopped_since = known.stopped_since or now
                if now - known.stopped_since >= self.stopped and not self._has(known.pid, "stopped"):
                    self.faults.append(
                        Fault("stopped", known.what, known.name, known.pid, known.stopped_since, known.rss)
                    )
            else:
                known.stopped_since = None
        died = []
        for pid in list(self.watched):
            if pid in alive or (psutil.pid_exists(pid) and _not_zombie(pid)):
                continue
            gone = self.watched.pop(pid)
            after = oom_kills(gone.cgroup)
            oom = None if after is None or gone.oom_kills is None else after > gone.oom_kills
            died.append(Fault("died", gone.what, gone.name, gone.pid, now, gone.rss, oom, _rank(gone.name)))
        for f in died:
            f.together = len(died) >= TOGETHER
        self.faults += died
        self._check_progress(now)

    def _sample_trainer(self, proc: psutil.Process) -> None:
        try:
            if self.trainer is None:
                name = " ".join(proc.cmdline()[1:4]) or proc.name()
                cgroup = _memory_cgroup(proc.pid)
                self.trainer = Watched(proc.pid, "the trainer", name, proc.create_time(), cgroup=cgroup)
                self.trainer.oom_kills = oom_kills(cgroup)
            self.trainer.rss = proc.memory_info().rss
        except psutil.Error:
            pass

    def trainer_oom(self) -> Fault | None:
        """The trainer's own death by SIGKILL, when its memory cgroup counted an OOM kill since it started."""
        t = self.trainer
        if t is None or t.oom_kills is None or (oom_kills(t.cgroup) or 0) <= t.oom_kills:
            return None
        return Fault("died", t.what, t.name, t.pid, time.time(), t.rss, True, -1)

    def _has(self, pid: int, kind: str) -> bool:
        return any(f.pid == pid and f.kind == kind for f in self.faults)

    def _check_progress(self, now: float) -> None:
        if self.stall is None or self.progress is None or any(f.kind == "stall" for f in self.faults):
            return
        try:
            last = self.progress.stat().st_mtime
        except OSError:
            return  # no step yet: starting a run is not a hang (its own time is the trainer's to take)
        if now - last >= self.stall:
            self.faults.append(Fault("stall", f"no training step for {now - last:.0f} s", "", None, last))

    def due(self) -> Fault | None:
        """The fault the run should be ended for now, if any: a death the trainer outlived by `dead` seconds, a
        process stopped for `stopped` seconds, a stall. Never the deaths of a trainer ending its own processes
        (its transfer queue, or its whole Ray at once): a run that is finishing may take its time to exit."""
        now = time.time()
        for f in self.faults:
            if f.kind == "died" and (f.together or f.name in ENDED_BY_RUN):
                continue
            if f.kind != "died" or now - f.at >= self.dead:
                return f
        return None


SIGKILL_PENDING = 1 << (9 - 1)  # SIGKILL's bit in /proc/PID/status's masks of pending signals
PF_EXITING = 0x4  # /proc/PID/stat's flags: the kernel is ending the process


def _dying(pid: int) -> bool:
    """Whether the process is being ended (SIGKILL pending, or the kernel tearing it down). A sample of it then says
    nothing of what it held (its memory is being freed), and its cgroup's OOM count may already hold its own kill:
    the OOM killer counts a kill before it signals. On a loaded host that teardown outlasted a sample, which then
    took the kill as the count to compare with, and the kill as no OOM."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    if int(stat.rsplit(")", 1)[1].split()[6]) & PF_EXITING:
        return True
    return any(
        line.startswith(("SigPnd:", "ShdPnd:")) and int(line.split()[1], 16) & SIGKILL_PENDING
        for line in status.splitlines()
    )


def _not_zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
