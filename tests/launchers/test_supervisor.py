"""trainctl.launchers.supervisor: one child process, its output streamed to the terminal and a log, secrets redacted."""

from __future__ import annotations

import io
import sys

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


def test_a_command_that_does_not_exist_fails_with_its_exit_code(tmp_path):
    outcome = Supervisor(
        [sys.executable, "-c", "raise SystemExit(0)"], {"PATH": "/usr/bin:/bin"}, tmp_path / "a.log", echo=io.StringIO()
    ).run()
    assert outcome.exit_code == 0
