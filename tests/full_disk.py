"""A disk that really fills up: a small tmpfs, mounted in a mount namespace of the command's own (`unshare --mount
--map-root-user`: no root needed where user namespaces are allowed). The mount lives as long as the command: nothing
is left mounted, and no other process sees it. What the command leaves on the disk is listed before it goes."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

LISTING = "=== what is on the disk ==="


@dataclass
class FullDisk:
    returncode: int
    output: str  # the command's stdout and stderr
    files: list[str]  # what is on the disk afterwards (paths relative to it, folders with a trailing /)


def run_on_small_disk(mount_point: Path, size: str, script: str, env: dict[str, str], timeout: float = 300) -> FullDisk:
    """Run the shell `script` with $DISK a fresh tmpfs of `size` (e.g. "256k") mounted at `mount_point`."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) here: a small disk cannot be made without root")
    mount_point.mkdir(parents=True, exist_ok=True)
    disk = shlex.quote(str(mount_point))
    wrapped = (
        f"mount -t tmpfs -o size={size} tmpfs {disk} || exit 99\n"
        f"export DISK={disk}\n"
        f"( {script} )\n"
        "code=$?\n"
        f"echo '{LISTING}'\n"
        f"cd {disk} && find . -mindepth 1 \\( -type d -printf '%P/\\n' \\) -o -printf '%P\\n' | sort\n"
        "exit $code\n"
    )
    proc = subprocess.run(
        ["unshare", "--mount", "--map-root-user", "sh", "-c", wrapped],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode == 99 or (proc.returncode != 0 and LISTING not in proc.stdout and "unshare" in proc.stderr):
        pytest.skip(f"a tmpfs cannot be mounted here (user namespaces off?): {proc.stderr.strip()[:300]}")
    output, _, listing = proc.stdout.partition(LISTING)
    return FullDisk(proc.returncode, output + proc.stderr, [line for line in listing.splitlines() if line])
