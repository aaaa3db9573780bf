"""The runs the server sees: every run folder directly under each runs root, found by its uuid or its name, with
its status read as `runs ls` reads it (trainctl.runs.status and the launcher registry: Ray jobs included).

A job's uuid is its run folder's identity: a uuid5 of the folder's resolved path. A run started from the CLI has
one without anything being written into its folder, a job created through the API has the uuid its folder will
have once it starts, and the same folder gets the same uuid after a server restart.

Pending jobs (created through the API, not started yet) are kept in the first root's `.serve/jobs/`, outside
every run folder.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid as uuidlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trainctl.launch.rundir import RUN_FILE
from trainctl.paths import atomic_write_text
from trainctl.runs.status import RunInfo, read_run
from trainctl.serve.reading import Summary, summary

NAMESPACE = uuidlib.UUID("5c7f6a0e-2f1b-4d8e-9a53-7b1e2c4d6f80")  # trainctl run folders
# a Ray job's status comes from its cluster: asked at most this often per run
JOB_QUERY_SECONDS = 5.0
STATE_DIR = ".serve"


def run_uuid(path: Path) -> str:
    return str(uuidlib.uuid5(NAMESPACE, str(Path(path).resolve())))


@dataclass
class Located:
    """A job found by uuid or name: a run folder, or a job created through the API and not started yet (`pending`:
    its saved plan; `path`: the run folder it will have once it starts, a folder that never holds a run when its
    plan named none)."""

    root: Path
    path: Path
    pending: dict | None = None


@dataclass
class Entry:
    """One run as the server shows it: the status of `runs ls` and the summary of its metrics."""

    uuid: str
    path: Path
    root: Path
    info: RunInfo
    summary: Summary

    def row(self) -> dict:
        """The run as the table and GET /api/jobs show it (kept until its status is read again)."""
        cached = self.__dict__.get("_cached_row")
        if cached is not None and cached[0] is self.info:
            return cached[1]
        row = self._row()
        self.__dict__["_cached_row"] = (self.info, row)
        return row

    def _row(self) -> dict:
        i = self.info
        head = self.summary.headline
        raw = i.raw
        return {
            "uuid": self.uuid,
            "name": i.name,
            "folder": self.path.name,
            "root": str(self.root),
            "algorithm": i.algorithm,
            "family": i.family,
            "backend": i.backend,
            "model": i.model,
            "data": i.data,
            "status": i.status,
            "detail": i.detail,
            "exit_code": i.exit_code,
            "steps_done": self.summary.steps_done,
            "steps_total": i.steps_total,
            "headline": {"name": head[0], "value": head[1]} if head else None,
            "seconds": i.seconds,
            "started": i.started.isoformat() if i.started else None,
            "created": raw.get("created"),
            "attempts": len(i.attempts),
            "launcher": (i.attempts[-1].get("launcher") if i.attempts else None) or "local",
        }


class RunStore:
    def __init__(self, roots: list[Path], on_secret_names: Callable[[list[str]], None] | None = None):
        self.roots = [Path(r).resolve() for r in roots]
        # told the variables each run names as secret (an MCP server's env, a judge's key_env) when it is first read,
        # before anything of it is served
        self.on_secret_names = on_secret_names
        self._configs_seen: dict[Path, int] = {}
        self._lock = threading.Lock()
        # path -> (signature, Entry, when read)
        self._cache: dict[Path, tuple[tuple, Entry, float]] = {}
        self._uuids: dict[Path, str] = {}
        self._paths: dict[tuple[Path, str], Path] = {}

    # -- finding -------------------------------------------------------------------------------------------------

    def folders(self) -> list[tuple[Path, Path]]:
        """(root, run folder) for every run folder under every root (os.scandir and plain stats: a table of
        hundreds of runs is read on every request)."""
        out = []
        for root in self.roots:
            try:
                with os.scandir(root) as it:
                    names = sorted(e.name for e in it if e.is_dir())
            except OSError:
                continue
            for name in names:
                d = self._paths.get((root, name))
                if d is None:
                    d = self._paths[(root, name)] = root / name
                if os.path.isfile(f"{root}/{name}/{RUN_FILE}"):
                    out.append((root, d))
        for _, d in out:  # before anything of any run is served
            self._secret_names(d)
        return out

    def uuid(self, path: Path) -> str:
        found = self._uuids.get(path)
        if found is None:
            found = self._uuids[path] = run_uuid(path)
        return found

    def find(self, key: str) -> tuple[Path, Path] | None:
        """A run by its uuid or its folder's name (the first root that has it)."""
        for root, d in self.folders():
            if d.name == key or self.uuid(d) == key:
                return root, d
        return None

    def locate(self, key: str) -> Located | None:
        """A run by uuid or name, else a created job (the API's routes that read a job ask this, so that a job is
        known from the moment it is created: its stream can be opened before it starts)."""
        found = self.find(key)
        if found is not None:
            return Located(*found)
        job = self.pending_job(key)
        if job is None:
            return None
        if not job.get("run_dir"):  # its plan failed before naming a folder: it cannot start; it is known all the same
            return Located(self.roots[0], self.jobs_dir / job["uuid"], job)
        path = Path(job["run_dir"])
        return Located(self.root_of(path) or path.parent, path, job)

    def root_of(self, path: Path) -> Path | None:
        path = Path(path).resolve()
        return next((r for r in self.roots if path == r or r in path.parents), None)

    # -- reading -------------------------------------------------------------------------------------------------

    def entries(self, query_jobs: bool = True) -> list[Entry]:
        """Every run, newest first (as `runs ls` orders them)."""
        out = [self.entry(root, d, query_jobs) for root, d in self.folders()]
        seen = {e.path for e in out}
        with self._lock:
            for gone in [p for p in self._cache if p not in seen]:
                del self._cache[gone]
        return sorted(out, key=lambda e: e.info.started.timestamp() if e.info.started else 0, reverse=True)

    def entry(self, root: Path, path: Path, query_jobs: bool = True) -> Entry:
        sig = _signature(path)
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(path)
        if cached and cached[0] == sig and not self._stale(cached[1], now - cached[2]):
            entry = cached[1]
            if entry.info.alive:  # its duration grows; its liveness is rechecked (a PID: cheap)
                entry.info = _info(path, entry.summary, query_jobs)
            return entry
        info = read_run(path, query_jobs=query_jobs, metrics=False)
        if cached and cached[0][1:] == sig[1:]:
            summ = cached[1].summary  # only run.json changed: the metrics did not
        else:
            summ = summary(path, info.family)
        info.steps_done, info.headline = summ.steps_done, summ.headline
        entry = Entry(self.uuid(path), path, root, info, summ)
        with self._lock:
            self._cache[path] = (sig, entry, now)
        return entry

    def _secret_names(self, path: Path) -> None:
        if self.on_secret_names is None:
            return
        try:
            mtime = os.stat(f"{path}/trainctl.yaml").st_mtime_ns
        except OSError:
            return
        if self._configs_seen.get(path) == mtime:
            return
        self._configs_seen[path] = mtime
        self.on_secret_names(secret_names(read_tree(path / "trainctl.yaml")))

    @staticmethod
    def _stale(entry: Entry, age: float) -> bool:
        # a Ray job's state lives in its cluster, not in the folder
        return entry.row()["launcher"] == "ray_job" and entry.info.alive and age > JOB_QUERY_SECONDS

    # -- pending jobs --------------------------------------------------------------------------------------------

    @property
    def jobs_dir(self) -> Path:
        return self.roots[0] / STATE_DIR / "jobs"

    def pending(self) -> list[dict]:
        out = []
        for f in sorted(self.jobs_dir.glob("*.json")) if self.jobs_dir.is_dir() else []:
            try:
                out.append(json.loads(f.read_text()))
            except (OSError, ValueError):
                continue
        return out

    def pending_job(self, key: str) -> dict | None:
        return next((j for j in self.pending() if key in (j.get("uuid"), j.get("name"))), None)

    def save_pending(self, job: dict) -> None:
        atomic_write_text(self.jobs_dir / f"{job['uuid']}.json", json.dumps(job, indent=2) + "\n")

    def drop_pending(self, uid: str) -> None:
        (self.jobs_dir / f"{uid}.json").unlink(missing_ok=True)


def read_tree(config: Path) -> dict:
    """A run's trainctl.yaml (libyaml's parser where there is one: a run's config in well under a millisecond)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        tree = yaml.load(config.read_text(), Loader=loader)
    except (OSError, ValueError, yaml.YAMLError):
        return {}
    return tree if isinstance(tree, dict) else {}


def secret_names(tree: dict) -> list[str]:
    """The variables a run's config names as holding secrets: its MCP servers' env, a judge's key_env."""
    names = []
    tools = tree.get("tools") if isinstance(tree.get("tools"), dict) else {}
    servers = tools.get("servers") if isinstance(tools.get("servers"), dict) else {}
    for spec in servers.values():
        if isinstance(spec, dict):
            names += [str(n) for n in spec.get("env") or [] if isinstance(n, str)]
    reward = tree.get("reward") if isinstance(tree.get("reward"), dict) else {}
    if reward.get("key_env"):
        names.append(str(reward["key_env"]))
    return names


def _info(path: Path, summ: Summary, query_jobs: bool) -> RunInfo:
    info = read_run(path, query_jobs=query_jobs, metrics=False)
    info.steps_done, info.headline = summ.steps_done, summ.headline
    return info


def _signature(path: Path) -> tuple:
    """What changes when a run changes: run.json and each metrics file (size and modification time)."""

    def stat(p: str) -> tuple:
        try:
            st = os.stat(p)
            return (st.st_size, st.st_mtime_ns)
        except OSError:
            return (-1, 0)

    try:
        with os.scandir(f"{path}/metrics") as it:
            files = sorted(e.name for e in it if e.name.startswith("attempt-") and e.name.endswith(".jsonl"))
    except OSError:
        files = []
    return (stat(f"{path}/{RUN_FILE}"), *(stat(f"{path}/metrics/{f}") for f in files))
