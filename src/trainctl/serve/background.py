"""`python -m trainctl.serve.background SERVER_PID ARGS...`: how the server starts a merge or an eval. The process
asks the kernel for SIGINT when the server's process ends, however it ends (`kill -9` included: Linux's
PR_SET_PDEATHSIG), then becomes `python ARGS` (exec: the same process, so the setting stays). SIGINT is Ctrl-C: the
command stops as it would at a terminal, and a merge removes its half-written folder."""

from __future__ import annotations

import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> None:
    server, args = int(argv[0]), argv[1:]
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGINT)
    except (OSError, AttributeError):  # not Linux: the server's shutdown still interrupts it (Actions.stop_all)
        pass
    if os.getppid() != server:  # the server ended before the setting was made: nothing to do for it
        sys.exit(130)
    os.execv(sys.executable, [sys.executable, *args])


if __name__ == "__main__":
    main(sys.argv[1:])
