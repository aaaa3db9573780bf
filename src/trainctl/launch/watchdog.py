"""The watchdog of one attempt: when its supervising trainctl dies without saying goodbye, the run's processes go too.

trainctl starts it beside the trainer, in a session of its own (a closed terminal does not reach it), with the read
end of a pipe as its stdin. Only the supervisor holds the write end, so the pipe closes the moment the supervisor
ends, however it ends: a clean exit writes `done` first; SIGKILL (the OOM killer, `kill -9`) closes it without a
word. In that case the watchdog stops every process carrying the attempt's mark (trainctl.launch.tree) and records
the attempt as killed in run.json, so that `runs ls` says what happened and `train --resume` continues the run.

    python -m trainctl.launch.watchdog RUN_DIR ATTEMPT MARK SUPERVISOR_PID TRAINER_PID
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from trainctl.launchers.supervisor import DONE


def orphaned(run_dir: Path, attempt: int, mark: str, supervisor: int, trainer: int) -> None:
    from trainctl.launch.rundir import RunDir
    from trainctl.launchers.tree import stop_marked

    stopped = stop_marked(mark, extra=[trainer])
    run = RunDir(run_dir)
    try:
        status = run.status()
    except (OSError, ValueError):
        return  # the run folder is gone: nothing to record
    last = status["attempts"][-1] if status.get("attempts") else {}
    if last.get("n") != attempt or last.get("ended"):
        return  # the supervisor recorded the end itself before it died
    run.finish_attempt(
        "killed",
        None,
        reason=f"trainctl (PID {supervisor}) was killed; its watchdog stopped the {stopped} processes it left",
    )


def main(argv: list[str]) -> int:
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)  # only the pipe decides; `runs stop` stops the supervisor, not this
    run_dir, attempt, mark, supervisor, trainer = argv
    said = b""
    while chunk := sys.stdin.buffer.read1(64):
        said += chunk
    if DONE not in said:
        orphaned(Path(run_dir), int(attempt), mark, int(supervisor), int(trainer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
