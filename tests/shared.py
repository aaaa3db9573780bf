"""What the test session makes once and every pytest-xdist worker shares (the default `-n 2` runs two workers)."""

from __future__ import annotations

import contextlib
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")


def shared_dir(tmp_path_factory) -> Path:
    """The session's base folder, the same for every pytest-xdist worker (each has its own basetemp below it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def once(tmp_path_factory, name: str, make: Callable[[Path], T]) -> T:
    """`make(folder)` once per test session, by whichever pytest-xdist worker asks first; the others wait for it and
    get the same value (pickled) or the same failure. `folder` is new, in the folder every worker shares."""
    from filelock import FileLock

    base = shared_dir(tmp_path_factory)
    done = base / f"{name}.pickle"
    with FileLock(base / f"{name}.lock"):
        if not done.is_file():
            try:
                value = make(base / name)
            except Exception as e:
                done.write_bytes(pickle.dumps(("failed", f"{type(e).__name__}: {e}")))
                raise
            done.write_bytes(pickle.dumps(("ok", value)))
            return value
        kind, value = pickle.loads(done.read_bytes())
    if kind == "failed":
        pytest.fail(f"{name}, made once for the session by another worker, failed: {value}"[:8000])
    return value


def install_entry_point(site: Path, dist: str, group: str, name: str, value: str) -> None:
    """What `pip install` of a package `dist` declaring the entry point `name = value` in `group` leaves in
    site-packages (put `site` on sys.path to have it installed)."""
    info = site / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{name} = {value}\n")


def processes_with(procs, text: str) -> list:
    """The processes among `procs` whose command line contains `text`, skipping any that exited meanwhile or are
    zombies (a worker's children include every earlier test's exited-but-unreaped processes: psutil raises on their
    command lines)."""
    import psutil

    found = []
    for p in procs:
        try:
            if text in " ".join(p.cmdline()):
                found.append(p)
        except psutil.Error:
            pass
    return found


def memory_cgroup_v1():
    """The cgroup v1 memory controller's root, where this machine lets a test make groups (root, writable), or None."""
    root = Path("/sys/fs/cgroup/memory")
    if not (root / "cgroup.procs").is_file() or not os.access(root, os.W_OK):
        return None
    return root


@contextlib.contextmanager
def memory_cgroup(limit: int | None = None):
    """A memory cgroup of the test's own (v1), with `limit` bytes if given; removed at the end, once what ran in it
    has ended (a real OOM kill needs a real limit: the kernel's OOM killer acts inside the group)."""
    import time
    import uuid

    group = memory_cgroup_v1() / f"trainctl-test-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    try:
        if limit is not None:
            (group / "memory.limit_in_bytes").write_text(str(limit))
        yield group
    finally:
        for _ in range(100):
            try:
                group.rmdir()
                break
            except OSError:  # busy: a process of it is still exiting
                time.sleep(0.1)
