"""verifiers' interpreter for the env=verifiers tests: the one `make install` made beside .venv (.venv-verifiers), or
the one TRAINCTL_VERIFIERS_VENV names; made here once if neither is (about a minute, then kept for later runs); the
tests that need it skip, saying why, only if it cannot be made (no network)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "verifiers"


@pytest.fixture(scope="session")
def verifiers_venv() -> Path:
    import fcntl
    import os

    from trainctl.envs import verifiers
    from trainctl.errors import TrainctlError

    named = os.environ.get(verifiers.VENV_VAR)
    for venv in ([Path(named)] if named else []) + [REPO / ".venv-verifiers"]:
        if verifiers.ready(venv):
            return venv
    with open(REPO / ".venv-verifiers.lock", "w") as lock:  # pytest-xdist's workers: one makes it, the other waits
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return verifiers.install(REPO / ".venv-verifiers", say=lambda line: None)
        except TrainctlError as e:
            pytest.skip(f"verifiers' interpreter could not be made ({e.message}; {' '.join(e.details)[-300:]})")


@pytest.fixture
def with_verifiers(verifiers_venv, monkeypatch) -> Path:
    """Plans in this test find verifiers' interpreter; the test tasksets' folder is FIXTURES."""
    from trainctl.envs import verifiers

    monkeypatch.setenv(verifiers.VENV_VAR, str(verifiers_venv))
    return verifiers_venv


def in_verifiers(venv: Path, script: str, payload) -> object:
    """What `script` prints (JSON), run in verifiers' interpreter with FIXTURES importable and `payload` (JSON) as its
    argv[1]: the tests' independent readings of verifiers' own Task.score."""
    import json
    import subprocess

    from trainctl.envs.verifiers import worker_env

    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", script, json.dumps(payload)], env=worker_env([str(FIXTURES)]),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)
