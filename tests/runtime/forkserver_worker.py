"""A stand-in for Ray's default_worker.py (tests/runtime/forkserver_harness.py starts it): writes what it sees to the
file named by its first argument, then exits with the code its second asks for, or sleeps until it is stopped."""

import gc
import json
import os
import sys

report, action = sys.argv[1], sys.argv[2]
facts = {
    "pid": os.getpid(),
    "ppid": os.getppid(),
    "argv": sys.argv[1:],
    "cwd": os.getcwd(),
    "worker_var": os.environ.get("WORKER_VAR"),
    "second_stage": "forkserver_remote" in sys.modules,
    "preloaded": "fractions" in sys.modules,
    "main": __name__,
    # the collector as the fork found it: on, with what the server had loaded frozen
    "gc_enabled": gc.isenabled(),
    "frozen": gc.get_freeze_count(),
}
if "ray._raylet" in sys.modules:
    from ray._raylet import ObjectID

    facts["ray_id"] = ObjectID.from_random().hex()
print(f"worker {facts['pid']} says hello", flush=True)  # its stdout is the client's
with open(report + ".tmp", "w") as f:
    json.dump(facts, f)
os.replace(report + ".tmp", report)
if action == "sleep":
    import time

    time.sleep(60)
sys.exit(int(action.split("=")[1]))
