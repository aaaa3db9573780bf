"""Driven by tests/runtime/test_forkserver.py: a driver with trainctl's fork server beside it, which starts workers as
Ray does (`PYTHON -S forkserver_client.py WORKER ARGS`, with the driver's environment and the worker's own additions)
and prints what each worker and its client reported, one JSON line per case.

The server preloads a small library (fractions) and, as its second stage, a module with a Ray actor class
(forkserver_remote, which imports Ray): the cases tell a fork before the second stage from one after it, and a fork
from a fresh Python, and compare the Ray IDs the forks draw.
"""

import json
import os
import signal
import subprocess
import sys
import time

from trainctl.runtime import forkserver

SECOND_STAGE = "forkserver_remote"
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "forkserver_worker.py")
out_dir = sys.argv[1]

server = forkserver.start(libraries=("fractions",), workers=(SECOND_STAGE,), vllm_workers=())
client = forkserver.py_executable().split()


def run(case: str, env: dict | None = None, signal_after: float | None = None, *args: str) -> dict:
    report = os.path.join(out_dir, f"{case}.json")
    proc = subprocess.Popen([*client, WORKER, report, *args], env={**os.environ, **(env or {})}, cwd=out_dir)
    if signal_after is not None:
        deadline = time.monotonic() + 60
        while not os.path.exists(report) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(signal_after)
        proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=60)
    with open(report) as f:
        facts = json.load(f)
    return {"case": case, "client_pid": proc.pid, "client_code": code, **facts}


def setup(case: str, context: dict, *args: str) -> dict:
    """A worker started as Ray starts it in a run whose driver the server runs: through trainctl's setup_worker
    (trainctl.runtime.forkserver_setup), with the runtime environment's context among the worker's arguments."""
    report = os.path.join(out_dir, f"{case}.json")
    argv = [sys.executable, forkserver.SETUP, WORKER, report, *args]
    argv += [f"--serialized-runtime-env-context={json.dumps(context)}", "--language=PYTHON"]
    proc = subprocess.Popen(argv, env={**os.environ, "SETUP_VAR": "from-the-raylet"}, cwd=out_dir)
    code = proc.wait(timeout=60)
    with open(report) as f:
        facts = json.load(f)
    return {"case": case, "client_pid": proc.pid, "client_code": code, **facts}


ours = {"py_executable": forkserver.py_executable(), "env_vars": {"WORKER_VAR": "${SETUP_VAR}-${UNSET_VAR}"}}
results = [
    run("first", {"WORKER_VAR": "one"}, None, "exit=3"),
    run("second", {"WORKER_VAR": "two"}, None, "exit=0"),
    run("third", {"WORKER_VAR": "three"}, None, "exit=0"),
    # what the server's imports read differs (its Python path): a fresh Python, as without the server
    run("other_path", {"PYTHONPATH": out_dir}, None, "exit=0"),
    run("no_server", {forkserver.SERVER_VAR: ""}, None, "exit=0"),
    run("terminated", {}, 0.2, "sleep"),
    setup("setup", ours, "exit=4"),
    # what trainctl's setup_worker does not do itself (a command prefix): Ray's own setup_worker.py
    setup("setup_by_ray", {**ours, "command_prefix": ["WORKER_VAR=prefixed"]}, "exit=0"),
]
print(json.dumps({"server": server, "driver": os.getpid(), "results": results}), flush=True)
