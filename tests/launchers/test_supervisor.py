"""trainctl.launchers.supervisor: one child process, its output streamed to the terminal and a log, secrets redacted."""

from __future__ import annotations

import io
import shutil
import sys

import pytest

from trainctl.launchers.supervisor import Supervisor


def test_output_goes_to_the_terminal_and_the_log_with_secrets_redacted(tmp_path):
    code = "import os, sys; print('step 1'); print('token', os.environ['HF_TOKEN']); sys.exit(3)"
    echo = io.StringIO()
    log = tmp_path / "logs" / "attempt-1.log"
    env = {"HF_TOKEN": "hf_secretvalue123", "PATH": "/usr/bin:/bin"}
    outcome = Supervisor([sys.executable, "-c", code], env, log, echo=echo).run()
    assert outcome.exit_code == 3 and outcome.interrupted is None
    for text in (echo.getvalue(), log.read_text()):
        assert "step 1" in text and "token ***" in text and "hf_secretvalue123" not in text
    assert outcome.tail[-1] == "token ***"


@pytest.mark.parametrize(
    "how",
    [
        # a launcher script or a job entrypoint (a shell line) that names a command not installed: the shell's 127
        "through a shell",
        # the trainer's program itself is not there: the same exit code and line, from the supervisor
        "as the program",
    ],
)
def test_a_command_that_does_not_exist_fails_with_its_exit_code(tmp_path, how):
    missing = "trainctl-no-such-command"
    assert shutil.which(missing, path="/usr/bin:/bin") is None
    argv = ["/bin/sh", "-c", missing] if how == "through a shell" else [missing]
    log = tmp_path / "a.log"
    outcome = Supervisor(argv, {"PATH": "/usr/bin:/bin"}, log, echo=io.StringIO()).run()
    assert outcome.exit_code == 127 and outcome.interrupted is None
    assert missing in outcome.tail[-1] and "not found" in outcome.tail[-1]
    assert missing in log.read_text()


def test_an_exception_raised_while_the_trainer_runs_stops_it_and_its_children(tmp_path):
    """trainctl failing while it waits (here an exception raised by a signal handler not its own, as a test harness's
    timeout raises one) takes the trainer and what it started along: nothing is left training alone."""
    import os
    import signal
    import threading

    import psutil

    code = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "print('child', child.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    started: list[int] = []

    def harness_timeout(signum, frame):
        raise TimeoutError("the harness's timeout")

    previous = signal.signal(signal.SIGUSR1, harness_timeout)
    timer = threading.Timer(3.0, os.kill, (os.getpid(), signal.SIGUSR1))
    timer.start()
    log = tmp_path / "a.log"
    try:
        with pytest.raises(TimeoutError):
            Supervisor([sys.executable, "-c", code], {"PATH": "/usr/bin:/bin"}, log, echo=io.StringIO(),
                       on_start=started.append).run()  # fmt: skip
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)
    child = int(log.read_text().split("child ")[1].split()[0])
    _, alive = psutil.wait_procs([psutil.Process(p) for p in (started[0], child) if psutil.pid_exists(p)], timeout=5)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], "the trainer or its child outlived trainctl"
