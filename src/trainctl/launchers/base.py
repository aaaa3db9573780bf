"""What every launcher answers. A launcher knows how a trainer process is started, followed, asked for its status
and stopped; the runner (trainctl.launch.runner) keeps the run folder and asks the launcher for each of these.

The run folder is passed in as `run` (a trainctl.launch.rundir.RunDir: start_attempt, set_live, beat,
update_attempt, set_state, finish_attempt, log_path); statuses are read from run.json as plain data, so that
`runs ls` and the server need nothing but the folder.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TextIO

from trainctl.errors import Problem, TrainctlError

if TYPE_CHECKING:
    from trainctl.config.schema import Hardware

# how long `runs stop` waits for a supervisor to end the run cleanly before escalating
STOP_GRACE_SECONDS = 30.0


@dataclass
class Job:
    """One attempt, as the runner prepared it: what to run and where it is recorded."""

    argv: list[str]  # the trainer's command, for this machine
    env: dict[str, str]  # the trainer's whole environment (the user's plus the run's additions)
    added_env: dict[str, str]  # the run's additions alone (what a Ray job carries)
    run_name: str
    steps_total: int | None = None
    echo: TextIO | None = None  # where the trainer's output goes while it runs here
    detach: bool = False  # return once started, without following
    # a Ray job's shell command, the files staged in its working dir (name -> source), its runtime_env's variables
    # (no secret but those the user forwards), and the cluster's Jobs API
    entrypoint: str = ""
    staged: dict[str, Path] = field(default_factory=dict)
    job_env: dict[str, str] = field(default_factory=dict)
    address: str | None = None
    # what a supervising launcher watches while it trains, and how long it waits (the run.watch section)
    watch: dict[str, float | None] = field(default_factory=dict)


@dataclass
class Ended:
    """How an attempt ended (or that it was left running, with detach)."""

    state: str  # finished | failed | interrupted | submitted
    exit_code: int
    seconds: float = 0.0
    tail: list[str] = field(default_factory=list)
    reason: str | None = None  # why it was interrupted: Ctrl-C, SIGTERM, terminal closed, stopped by runs stop
    job_id: str | None = None
    # why it failed, as the launcher saw it: (what happened, what to do, the same in a few words)
    verdict: tuple[str, str, str] | None = None
    watched: bool = False  # the verdict is a death the supervisor saw (what the trainer's own error says may win)


@dataclass
class Status:
    """Where an attempt stands, as `runs ls` says it."""

    status: str  # running | done | failed | interrupted | killed | created | queued | stopped | lost | unknown
    detail: str = ""
    exit_code: int | None = None
    ended: float | None = None  # when an attempt nobody followed ended (epoch seconds), as its cluster says


class Launcher:
    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    # how the trainer reaches Ray: "own" (it starts its own, or needs none), "join" (it joins the running cluster at
    # hardware.ray_address), "inside" (it runs inside the cluster, as a job)
    ray: ClassVar[str] = "own"
    # the form hardware.ray_address takes, when the launcher needs one
    address_example: ClassVar[str | None] = None
    # how a torchrun trainer (verl's SFT, TRL) places its ranks: "standalone" (on this machine), "ray" (through Ray
    # instead: sft_trainer_ray, Ray Train), "rendezvous" (the launcher starts one torchrun agent on each node and
    # gives them their c10d rendezvous endpoint in torchrun's PET_RDZV_ENDPOINT: Slurm); None: as `ray` implies
    torchrun: ClassVar[str | None] = None
    # the run goes on with no trainctl following it (a scheduler holds it): --detach submits it and returns
    queues: ClassVar[bool] = False

    def torchrun_mode(self) -> str:
        return self.torchrun or ("standalone" if self.ray == "own" else "ray")

    # -- plan time: nothing is started -------------------------------------------------------------------------

    def trainer_env(self, hw: Hardware) -> dict[str, str]:
        """What the trainer's environment needs to find its cluster."""
        return {}

    def config_problems(self, hw: Hardware, launching: bool) -> list[Problem]:
        """What is wrong with the hardware option for this launcher (warnings on a dry run: the plan may be for
        another machine)."""
        if self.ray == "own" and not self.queues and hw.nnodes > 1:
            # this machine is one node (a cluster's launchers place the others)
            return [
                Problem(
                    f"hardware.nnodes = {hw.nnodes}, but hardware.launcher={self.name} runs on this machine: one node.",
                    key="hardware.nnodes",
                    hint="run on a cluster: hardware.launcher=ray_cluster hardware.ray_address=HEAD_IP:6379, or "
                    "hardware.launcher=slurm; or hardware.nnodes=1",
                    severity="error" if launching else "warning",
                )
            ]
        if self.address_example and not hw.ray_address:
            return [
                Problem(
                    f"hardware={hw.name} runs on a Ray cluster ({self.name}) but no address is set.",
                    key="hardware.ray_address",
                    hint=f"export RAY_ADDRESS={self.address_example}, or hardware.ray_address={self.address_example}",
                    severity="error" if launching else "warning",
                )
            ]
        return []

    def preflight(self, plan: Any) -> list[Problem]:
        """What only a real launch needs from this machine or cluster (devices, tools, credentials)."""
        return []

    # -- running -------------------------------------------------------------------------------------------------

    def start(self, job: Job, run: Any, on_attempt: Callable[[Any, dict], None] | None = None) -> Ended:
        """Start the attempt, record it in the run folder, follow it to its end (unless job.detach) and return how
        it ended. `on_attempt(run, attempt)` is called once the attempt is recorded (the live view starts there)."""
        raise NotImplementedError

    def explain(self, job: Job, started: float, tail: list[str]) -> tuple[str, str, str] | None:
        """Why an attempt that started at `started` (epoch seconds) failed, as only this launcher can tell (a Ray
        cluster's lost node): (what happened, what to do, the same in a few words), or None."""
        return None

    def status(self, run_state: str, attempt: dict, live: dict, query: bool = True) -> Status:
        """Where the last attempt stands: as run.json recorded its end, or, while it says running (or submitted),
        the launcher's own answer (live_status)."""
        if run_state in ("running", "submitted"):
            return self.live_status(attempt, live, query)
        status = {"finished": "done"}.get(run_state, run_state)
        code = attempt.get("exit_code")
        if status == "failed":
            cause = attempt.get("cause")
            return Status("failed", f"exit {code}" + (f": {cause}" if cause else ""), code)
        return Status(status, attempt.get("reason") or "", code)

    def live_status(self, attempt: dict, live: dict, query: bool = True) -> Status:
        """Where an attempt that run.json says is running (or submitted) really stands; `query=False` asks no
        remote service (a cluster's API)."""
        raise NotImplementedError

    def stop(self, run: Any, grace: float = STOP_GRACE_SECONDS) -> str:
        """Stop a running attempt cleanly, escalating after `grace` seconds; returns what was done, in a sentence."""
        raise NotImplementedError

    def logs(self, run_dir: Path, attempt: dict) -> str:
        """The attempt's whole output so far."""
        log = Path(run_dir) / attempt.get("log", "")
        if not log.is_file():
            raise TrainctlError(f"{log}: no log yet.", hint="the attempt may not have started")
        return log.read_text(errors="replace")
