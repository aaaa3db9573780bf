"""Where trainctl finds its config groups and keeps its caches."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

_PACKAGE_DIR = Path(__file__).resolve().parent


def builtin_conf_dir() -> Path:
    """The shipped config groups: inside the package when installed from a wheel, else the repository's `conf/`."""
    packaged = _PACKAGE_DIR / "conf"
    if packaged.is_dir():
        return packaged
    return _PACKAGE_DIR.parent.parent / "conf"


def home_dir() -> Path:
    """trainctl's home, as the config's paths.home reads it: $TRAINCTL_HOME, else ~/.trainctl."""
    return Path(os.environ.get("TRAINCTL_HOME") or Path.home() / ".trainctl").expanduser()


def home_conf_dir() -> Path:
    """The options trainctl writes itself (a model imported under a name of one's own: conf/model/NAME.yaml)."""
    return home_dir() / "conf"


def user_conf_dirs(extra: list[Path] | None = None, cwd: Path | None = None) -> list[Path]:
    """The user's config folders, searched before the built-in groups: each `--config-dir`, then `./conf`, then the
    home's (home_conf_dir: the options trainctl wrote)."""
    builtin = builtin_conf_dir().resolve()
    candidates = [*(extra or []), (cwd or Path.cwd()) / "conf", home_conf_dir()]
    found: list[Path] = []
    for d in candidates:
        d = d.expanduser().resolve()
        if d.is_dir() and d != builtin and d not in found:
            found.append(d)
    return found


def cache_dir() -> Path:
    """trainctl's cache (composed backend defaults): $TRAINCTL_CACHE, else $XDG_CACHE_HOME/trainctl."""
    if os.environ.get("TRAINCTL_CACHE"):
        return Path(os.environ["TRAINCTL_CACHE"]).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "trainctl"


# libraries that write a cache of their own under ~ on first use: the variable that moves it, and its folder under
# trainctl's cache. matplotlib builds its font list in ~/.cache/matplotlib the first time a process imports its font
# manager: `runs plot` does, and reasoning-gym (env=reasoning_gym: the plan, the trainer's scorer, eval) imports it.
LIBRARY_CACHES = {"MPLCONFIGDIR": "matplotlib"}


def library_cache_env(env: dict[str, str] | os._Environ) -> dict[str, str]:
    """Where those caches go instead (trainctl's cache), for each the user has not chosen: trainctl's CLI sets them
    in its own environment, which every process it starts inherits."""
    return {var: str(cache_dir() / folder) for var, folder in LIBRARY_CACHES.items() if not env.get(var)}


def atomic_write_text(path: Path, text: str) -> None:
    """Write a file so that readers see the old content or the new, never half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def keep_cached(path: Path, data: Callable[[], bytes]) -> None:
    """Write what this process keeps in memory to its file in the cache folder, if the file is not there. A value
    memoized in a process outlives a change of $TRAINCTL_CACHE (a test session, a server launching for several
    homes); the processes the new folder's owner launches must find it there, not build it again (TRL's defaults
    cost a launch ~8 s of CPU: they import TRL)."""
    if not path.is_file():
        atomic_write_bytes(path, data())


def file_version(path: Path) -> tuple | None:
    """What tells one version of a file from another (its real path, size, time, inode); None when it is no file."""
    import stat

    real = Path(path).expanduser().resolve()
    try:
        st = real.stat()
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return str(real), st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev


def memo_on_files(kind: str, files: list[Path], key: object, compute: Callable[[], Any], pickled: bool = False) -> Any:
    """`compute()`, an answer read from `files` (and from `key`, its other inputs, as a repr-able value), kept in
    the cache folder under `kind/` per version of every file, as JSON (or pickled: data JSON would change, such as a
    YAML file's integer keys): list the modules that compute it among the files, so that a changed check is not
    answered by its old self. A damaged entry is computed again. Not kept: None, an answer computed while a file
    changed, and one computed within a tick of the file system's clock after a file was written (a rewrite within
    that tick could keep its size and time: git's "racy" files)."""
    import hashlib
    import json
    import pickle
    import time

    versions = [file_version(f) for f in files]
    if None in versions:
        return compute()
    entry = cache_dir() / kind / hashlib.sha1(repr((versions, key)).encode()).hexdigest()[:24]
    try:
        data = entry.read_bytes()
        return pickle.loads(data) if pickled else json.loads(data)["answer"]
    except Exception:  # not there, or damaged in any way: computed again
        pass
    answer = compute()
    now = time.time_ns()
    unchanged = [file_version(f) for f in files] == versions
    if answer is not None and unchanged and all(_settled(v[2], now) for v in versions):
        atomic_write_bytes(entry, pickle.dumps(answer) if pickled else json.dumps({"answer": answer}).encode())
    return answer


def _settled(mtime_ns: int, now_ns: int) -> bool:
    """Whether a file was written at least a tick of its file system's clock before `now`: a few milliseconds on
    most; two seconds on those whose times are whole seconds."""
    tick = 2_000_000_000 if mtime_ns % 1_000_000_000 == 0 else 50_000_000
    return mtime_ns < now_ns - tick
