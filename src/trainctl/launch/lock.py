"""The run's lockfile: the versions that produced it, and the git commit of the config."""

from __future__ import annotations

import importlib.metadata
import platform
import subprocess
import sys
from pathlib import Path

PACKAGES = (
    "trainctl",
    "verl",
    "torch",
    "transformers",
    "trl",
    "peft",
    "ray",
    "datasets",
    "hydra-core",
    "vllm",
    "sglang",
)


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_state(folder: Path) -> dict | None:
    """The commit (and whether the tree has changes) of the git repository holding `folder`, if any."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        if commit.returncode != 0:
            return None
        status = subprocess.run(
            ["git", "-C", str(folder), "status", "--porcelain"], capture_output=True, text=True, timeout=5
        )
        root = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "--show-toplevel"], capture_output=True, text=True, timeout=5
        )
        return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip()), "repo": root.stdout.strip()}
    except (OSError, subprocess.SubprocessError):
        return None


def lockfile(config_folders: list[Path]) -> dict:
    git = {}
    for folder in config_folders:
        state = git_state(folder)
        if state:
            git[str(folder)] = state
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": versions(),
        "git": git,
    }
