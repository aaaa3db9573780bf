"""How a CPU run's Ray workers start (Ray's runtime_env py_executable: `PYTHON -S forkserver_client.py`).

Ray runs `<py_executable> default_worker.py ARGS...` for each worker. This asks trainctl's fork server
(trainctl.runtime.forkserver, named by TRAINCTL_FORKSERVER) for a worker forked from a process that has imported
what workers import, and stands in for it until it ends: its exit code is this process's, and the signals this
process gets are passed on. Where there is no server, or it declines, Python starts as Ray would have started it.

Run with `python -S` (no site-packages: this file uses the standard library only, and starts in ~20 ms); it must
never import trainctl. The wire format is trainctl.runtime.forkserver's: keep the two in step.
"""

import contextlib
import json
import os
import signal
import socket
import struct
import sys

SERVER_VAR = "TRAINCTL_FORKSERVER"
# seconds to wait for the server to fork: it may still be importing when the first workers start
FORK_TIMEOUT_S = 120.0


def _exec_python(argv):
    os.execv(sys.executable, [sys.executable, *argv])


def _recv_int(conn):
    data = b""
    while len(data) < 4:
        chunk = conn.recv(4 - len(data))
        if not chunk:
            return None
        data += chunk
    return struct.unpack("!i", data)[0]


def main(argv):
    name = os.environ.get(SERVER_VAR, "")
    if not name:
        _exec_python(argv)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(FORK_TIMEOUT_S)
    try:
        conn.connect("\0" + name)
        # Ray starts its workers with SIGINT blocked (the raylet's mask, kept across exec): the fork keeps this mask
        mask = sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, []))
        body = json.dumps({"argv": argv, "env": dict(os.environ), "cwd": os.getcwd(), "sigmask": mask}).encode()
        socket.send_fds(conn, [struct.pack("!I", len(body)) + body], [0, 1, 2])
        pid = _recv_int(conn)
    except OSError:
        pid = None
    if not pid:  # no server, or it declined: start as Ray would have
        conn.close()
        _exec_python(argv)

    def forward(signum, frame):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, forward)
    conn.settimeout(None)
    while True:
        try:
            code = _recv_int(conn)
            break
        except InterruptedError:
            continue
        except OSError:
            code = None
            break
    if code is not None and code < 0:  # the worker was killed by a signal: so is this process, for the raylet to see
        signal.signal(-code, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [-code])
        os.kill(os.getpid(), -code)
    # the server gone before its worker ended: the worker ends with Ray's raylet, which watches it
    os._exit(1 if code is None else code & 0xFF)


if __name__ == "__main__":
    main(sys.argv[1:])
