"""A driver for tests/runtime/test_forkserver.py, run as verl's is: `python -m trainctl.runtime.forkserver -- python -m
forkserver_driver REPORT ACTION`. It starts two children as Ray's processes (one that ignores SIGTERM), writes what it
sees to REPORT (with the time it ends), then exits with the code ACTION names, or raises."""

import json
import os
import subprocess
import sys
import time

import ray._private.ray_constants as ray_constants

report, action = sys.argv[1], sys.argv[2]
stubborn = subprocess.Popen(
    [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); "
     "time.sleep(120)"],
    stdout=subprocess.PIPE,
)  # fmt: skip
stubborn.stdout.readline()  # its handler is set
polite = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
facts = {
    "pid": os.getpid(),
    "name": __name__,
    "argv": sys.argv[1:],
    "setup_worker": ray_constants.SETUP_WORKER_FILENAME,
    "children": [stubborn.pid, polite.pid],
    # the driver's end, on the clock the test reads (CLOCK_MONOTONIC: one for every process of the machine)
    "ending": time.monotonic(),
}
with open(report, "w") as f:
    json.dump(facts, f)
print("the driver's last line", flush=True)
if action == "raise":
    raise RuntimeError("the driver failed")
sys.exit(int(action))
