"""Where trainctl finds its config groups and keeps its caches."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def builtin_conf_dir() -> Path:
    """The shipped config groups: inside the package when installed from a wheel, else the repository's `conf/`."""
    packaged = _PACKAGE_DIR / "conf"
    if packaged.is_dir():
        return packaged
    return _PACKAGE_DIR.parent.parent / "conf"


def user_conf_dirs(extra: list[Path] | None = None, cwd: Path | None = None) -> list[Path]:
    """The user's config folders, searched before the built-in groups: each `--config-dir`, then `./conf`."""
    builtin = builtin_conf_dir().resolve()
    candidates = [*(extra or []), (cwd or Path.cwd()) / "conf"]
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
