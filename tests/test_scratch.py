"""trainctl.scratch: the folder a run's trainer gets for its temporary files (TMPDIR) under trainctl's cache."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from trainctl import scratch


def test_a_folder_of_this_process_own_under_the_cache_and_the_variables_that_point_there(monkeypatch):
    with tempfile.TemporaryDirectory(prefix="tc-") as cache:
        monkeypatch.setenv("TRAINCTL_CACHE", cache)
        folder = scratch.make()
        other = scratch.make()
        assert folder.parent == other.parent == Path(cache) / "tmp" and folder != other
        assert (
            folder.is_dir() and folder.name == f"{scratch._host()}-{os.getpid()}" and other.name == f"{folder.name}.1"
        )
        got = scratch.env(folder, {})
        assert got == {
            "TMPDIR": str(folder),
            "RAY_TMPDIR": "/tmp",
            "TORCHINDUCTOR_CACHE_DIR": scratch.inductor_cache_dir(),
        }
        # a child with those variables writes its temporary files there, and multiprocessing's socket fits
        code = "import multiprocessing.util as u, tempfile; print(tempfile.gettempdir()); print(u.get_temp_dir())"
        out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **got}, capture_output=True, text=True)
        tempdir, pymp = out.stdout.split()
        assert tempdir == str(folder) and Path(pymp).parent == folder
        assert len(os.fsencode(Path(pymp) / "listener-xxxxxxxx")) <= scratch.SOCKET_PATH_MAX
        scratch.remove(folder)
        assert not folder.exists() and other.exists()
        # the user's own choices stand
        assert scratch.env(other, {"TMPDIR": "/data/tmp"}) == {}
        mine = {"RAY_TMPDIR": "/data/ray", "TORCHINDUCTOR_CACHE_DIR": "/data/inductor"}
        assert scratch.env(other, mine) == {"TMPDIR": str(other)}
        assert scratch.env(None, {}) == {}


def test_a_folder_whose_owner_is_gone_is_removed_by_the_next_one_made(monkeypatch):
    with tempfile.TemporaryDirectory(prefix="tc-") as cache:
        monkeypatch.setenv("TRAINCTL_CACHE", cache)
        gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
        here = scratch._host()
        orphan = Path(cache) / "tmp" / f"{here}-{gone.stdout.strip()}"
        (orphan / "pymp-x").mkdir(parents=True)
        (orphan / "ckpt_0123abcd.lock").touch()
        live = Path(cache) / "tmp" / f"{here}-{os.getppid()}"
        live.mkdir()
        # another machine's, in a cache on a shared file system: its PID means nothing here
        elsewhere = Path(cache) / "tmp" / f"{'0' * 4 if here != '0' * 4 else '1' * 4}-{gone.stdout.strip()}"
        elsewhere.mkdir()
        made = scratch.make()
        assert not orphan.exists() and live.exists() and elsewhere.exists() and made.exists()


def test_no_folder_where_a_socket_in_it_would_not_fit(monkeypatch, tmp_path):
    deep = tmp_path / ("x" * 60)
    monkeypatch.setenv("TRAINCTL_CACHE", str(deep))
    assert scratch.make() is None
    assert not (deep / "tmp").exists() or not any((deep / "tmp").iterdir())


def test_a_command_s_own_temporary_files_and_its_childrens_for_the_with_block(monkeypatch):
    """chat and eval: vLLM in their own process makes its rendezvous file with tempfile, tool servers are children."""
    with tempfile.TemporaryDirectory(prefix="tc-") as cache:
        monkeypatch.setenv("TRAINCTL_CACHE", cache)
        monkeypatch.delenv("TMPDIR", raising=False)
        before = tempfile.gettempdir()
        with scratch.for_this_process() as folder:
            assert folder.parent == Path(cache) / "tmp"
            assert tempfile.gettempdir() == str(folder) and os.environ["TMPDIR"] == str(folder)
            assert os.environ["RAY_TMPDIR"] == "/tmp"
            made = tempfile.mkdtemp(prefix="trainctl-chat-")
            child = subprocess.run([sys.executable, "-c", "import tempfile; print(tempfile.gettempdir())"],
                                   capture_output=True, text=True)  # fmt: skip
            assert child.stdout.strip() == str(folder) and Path(made).parent == folder
        assert not folder.exists() and not (Path(cache) / "tmp").exists(), "nothing left in the cache"
        assert tempfile.gettempdir() == before and "TMPDIR" not in os.environ and "RAY_TMPDIR" not in os.environ
        # the user's TMPDIR stands
        monkeypatch.setenv("TMPDIR", before)
        with scratch.for_this_process() as folder:
            assert folder is None and os.environ["TMPDIR"] == before
