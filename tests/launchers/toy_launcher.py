"""A launcher from outside the package, as a user's package adds one (an entry point `toy` in the group
trainctl.launchers): it 'submits' the run to a queue that is a folder, and answers for its status and a stop."""

from __future__ import annotations

import json
import time
from pathlib import Path

from trainctl.launchers import Launcher, register
from trainctl.launchers.base import Ended, Job, Status

QUEUE = "toy-queue"


@register("toy")
class ToyQueue(Launcher):
    description = "a queue in a folder (a test's stand-in for Slurm)"

    def start(self, job: Job, run, on_attempt=None) -> Ended:
        ticket = run.path.parent / QUEUE / f"{job.run_name}.json"
        ticket.parent.mkdir(exist_ok=True)
        ticket.write_text(json.dumps({"argv": job.argv, "queued": time.time()}))
        run.start_attempt(self.name, ticket=str(ticket))
        run.update_attempt(state="submitted")
        run.set_state("submitted")
        return Ended("submitted", 0, job_id=ticket.stem)

    def live_status(self, attempt: dict, live: dict, query: bool = True) -> Status:
        if Path(attempt["ticket"]).is_file():
            return Status("queued", f"toy ticket {Path(attempt['ticket']).name}")
        return Status("stopped", "the ticket is gone")

    def stop(self, run, grace: float = 30.0) -> str:
        attempt = run.status()["attempts"][-1]
        Path(attempt["ticket"]).unlink()
        run.finish_attempt("interrupted", 130, reason="ticket withdrawn")
        return f"withdrew {run.path.name}'s ticket"
