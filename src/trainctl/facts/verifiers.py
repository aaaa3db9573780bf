"""Where verifiers' own interpreter is (env=verifiers, trainctl.envs.verifiers; tools=verifiers): verifiers 0.4.0 pins
mcp==2.0.0 and openai<3, which cannot share trainctl's interpreter (mcp>=2.3), so it lives in a virtual environment of
its own. Plain functions of the home folder, importing nothing of trainctl: a plan's checks, the config's resolvers
(conf/tools/verifiers.yaml starts that interpreter) and the run's scorer all find it the same way."""

from __future__ import annotations

import os
from pathlib import Path

VERSION = "0.4.0"
PIN = f"verifiers=={VERSION}"
# a verifiers interpreter made elsewhere (the Makefile's, beside .venv): searched before the home's
VENV_VAR = "TRAINCTL_VERIFIERS_VENV"
# written into a finished interpreter: one without it is half made
READY = ".trainctl-ready"
# the program trainctl runs there (its stdlib and verifiers only)
WORKER = Path(__file__).resolve().parent.parent / "runtime" / "verifiers_worker.py"


def default_venv(home: Path) -> Path:
    """Where `trainctl env install verifiers` puts the interpreter: <home>/envs/verifiers-VERSION."""
    return home / "envs" / f"verifiers-{VERSION}"


def candidates(home: Path) -> list[Path]:
    """The places interpreter() looks, in order: $TRAINCTL_VERIFIERS_VENV, then the home's."""
    found = [Path(os.environ[VENV_VAR]).expanduser()] if os.environ.get(VENV_VAR) else []
    return [*found, default_venv(home)]


def python_of(venv: Path) -> Path:
    return venv / "bin" / "python"


def ready(venv: Path) -> bool:
    return (venv / READY).is_file() and python_of(venv).exists()


def interpreter(home: Path) -> Path | None:
    """The python of the first finished verifiers interpreter (None: none is installed)."""
    return next((python_of(v) for v in candidates(home) if ready(v)), None)
