"""A run supervised by the local launcher, as `trainctl train` runs one, of a stand-in trainer:

    python -m tests.launchers.supervised RUN_DIR

The stand-in starts a grandchild that leaves its session and double-forks (as Ray's daemons do), writes the PIDs of
both to RUN_DIR/pids, says "ready" and sleeps. The supervising process records the attempt in RUN_DIR/run.json.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

TRAINER = r"""
import os, sys, time
pids = [os.getpid()]
r, w = os.pipe()
if os.fork() == 0:                      # the daemon: its own session, its parent gone
    os.setsid()
    if os.fork() == 0:
        os.write(w, str(os.getpid()).encode()); os.close(w)
        time.sleep(600); os._exit(0)
    os._exit(0)
os.close(w)
pids.append(int(os.read(r, 32)))
open(sys.argv[1] + ".tmp", "w").write(" ".join(map(str, pids)))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
print("ready", flush=True)
time.sleep(600)
"""


def main(run_dir: str) -> int:
    from trainctl import launchers
    from trainctl.launch.rundir import RunDir
    from trainctl.launchers.base import Job

    run = RunDir(Path(run_dir))
    run.path.mkdir(parents=True, exist_ok=True)
    (run.path / "run.json").write_text(json.dumps({"name": run.path.name, "state": "created", "attempts": []}))
    argv = [sys.executable, "-c", TRAINER, str(run.path / "pids")]
    job = Job(argv=argv, env=dict(os.environ), added_env={}, run_name=run.path.name, echo=sys.stdout)
    lock = run.lock()  # as trainctl.launch.runner does
    ended = launchers.get("local").start(job, run)
    lock.release()
    print(f"ended {ended.state} {ended.exit_code} {ended.reason}", flush=True)
    return ended.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
