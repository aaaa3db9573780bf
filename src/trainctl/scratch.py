"""A run's temporary files in trainctl's cache rather than the system's temporary folder (/tmp).

The libraries a run's trainer starts write there through Python's tempfile (TMPDIR), and most never remove what they
wrote: verl a lock file per checkpoint folder it makes (ckpt_<hash>.lock), torchrun a log folder per launch
(torchelastic_*), wandb its staging folders, multiprocessing its listener sockets (pymp-*), vLLM a rendezvous file
per engine (vllm_dist_*), trainctl's TRL entry point the trainer's config. A day of test sessions on one machine left
about 680 of them in /tmp. A run's trainer now gets TMPDIR set to a folder of its attempt's own under trainctl's
cache (`tmp/HOST-PID`, PID the supervising trainctl's), removed when the attempt ends; a folder whose owner was
killed (SIGKILL: nothing removed it) is removed by the next trainctl that makes one. The user's own TMPDIR stands.
The commands that run an engine or start servers and end with them (trainctl.cli.common.tethered) do the same with
theirs: `chat` and `eval` for the length of for_this_process (vLLM in their own process, tool servers as children),
`model serve` for its vLLM server's process. A Slurm job's script does the same on its nodes (batch_job_lines: a
folder `tmp/job-ID`, in place of the /tmp Slurm gives a job without a TMPDIR), which it removes as it ends.

Two stay where they were, pinned because they read TMPDIR too: Ray's session folder (RAY_TMPDIR: its Unix sockets'
paths must fit 107 bytes, which a folder under the cache does not promise) and torch inductor's compile cache
(TORCHINDUCTOR_CACHE_DIR: shared by every run on the machine, vLLM's CPU build fills it; in a run's own folder each
run would compile from cold).
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import os
import re
import shlex
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

from trainctl.paths import cache_dir

FOLDER = "tmp"
SOCKET_PATH_MAX = 107
# the longest socket path a process makes under TMPDIR, after the folder: multiprocessing's
# /pymp-XXXXXXXX/listener-XXXXXXXX
SOCKET_TAIL = 32


def make() -> Path | None:
    """A new folder for this process's children's temporary files under trainctl's cache (folders of owners that
    are gone removed first), or None where its path leaves no room for a socket inside it."""
    root = cache_dir() / FOLDER
    sweep(root)
    name = f"{_host()}-{os.getpid()}"
    for n in range(100):  # .N: the same process's second folder while its first is in use
        folder = root / (name if n == 0 else f"{name}.{n}")
        if len(os.fsencode(folder)) + SOCKET_TAIL > SOCKET_PATH_MAX:
            return None
        try:
            folder.mkdir(parents=True)
        except FileExistsError:
            continue
        except FileNotFoundError:  # another trainctl removed the emptied `tmp` between the two mkdirs
            folder.mkdir(parents=True)
        return folder
    return None


def remove(folder: Path | None) -> None:
    """Remove the folder, and `tmp` too once it is empty: nothing left in the cache."""
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(OSError):
            folder.parent.rmdir()


def sweep(root: Path) -> list[Path]:
    """Remove the folders under `root` whose owner process, on this machine, is gone; returns them. (A cache on a
    shared file system holds other machines' folders too, whose PIDs mean nothing here.)"""
    gone = []
    for folder in root.glob(f"{_host()}-*"):
        owner = folder.name.split("-", 1)[1].split(".", 1)[0]
        if owner.isdigit() and not _alive(int(owner)):
            remove(folder)
            gone.append(folder)
    return gone


def _host() -> str:
    """This machine, in a few characters (a socket's path has few to spare)."""
    return hashlib.sha1(socket.gethostname().encode()).hexdigest()[:4]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def env(folder: Path | None, current: dict[str, str]) -> dict[str, str]:
    """The variables that send a process's temporary files to `folder`, given its environment `current`: none where
    the user chose TMPDIR or there is no folder. Ray's folder and inductor's cache keep the places they had."""
    if folder is None or current.get("TMPDIR"):
        return {}
    out = {"TMPDIR": str(folder)}
    if not current.get("RAY_TMPDIR"):
        out["RAY_TMPDIR"] = "/tmp"  # Ray's own choice on Linux without TMPDIR (ray._common.utils)
    if not current.get("TORCHINDUCTOR_CACHE_DIR"):
        out["TORCHINDUCTOR_CACHE_DIR"] = inductor_cache_dir()
    return out


def batch_job_lines(current: dict[str, str], job_id: str = "$SLURM_JOB_ID") -> list[str]:
    """For a batch job's script (Slurm's): bash lines that send the trainer's temporary files to a folder of the
    job's own under trainctl's cache, and define `remove_job_tmp`, which removes it (the script's exit trap calls it).
    Slurm sets TMPDIR=/tmp in a job that has none (the folder these lines replace); one the user chose (`current`,
    the environment sbatch runs in) or the cluster chose for its jobs stands, as does /tmp where the node cannot make
    the folder (a cache the nodes do not share). Ray's folder and inductor's cache keep their places, as env() keeps
    them."""
    root = cache_dir() / FOLDER
    if current.get("TMPDIR") or len(os.fsencode(root)) + len("/job-") + 12 + SOCKET_TAIL > SOCKET_PATH_MAX:
        return ["remove_job_tmp() { :; }"]
    folder = f'{shlex.quote(str(root))}/job-"{job_id}"'
    return [
        "# the trainer's temporary files (verl's lock file per checkpoint folder, torchrun's logs, ...) in a folder of",
        "# the job's own under trainctl's cache, removed when the job ends; Ray's session folder stays in /tmp",
        f'remove_job_tmp() {{ if [ -n "${{job_tmp:-}}" ]; then rm -rf "$job_tmp"; rmdir {shlex.quote(str(root))}'
        " 2>/dev/null; fi; }",
        f'if [ "${{TMPDIR:-/tmp}}" = /tmp ] && mkdir -p {folder} 2>/dev/null; then',
        f"  job_tmp={folder}",
        '  export TMPDIR="$job_tmp" RAY_TMPDIR="${RAY_TMPDIR:-/tmp}"'
        f' TORCHINDUCTOR_CACHE_DIR="${{TORCHINDUCTOR_CACHE_DIR:-{inductor_cache_dir()}}}"',
        '  echo "trainctl: the trainer\'s temporary files go to $TMPDIR, removed when the job ends"',
        "fi",
    ]


@contextlib.contextmanager
def for_this_process() -> Iterator[Path | None]:
    """For the `with` block, this process's temporary files and its children's (tempfile, TMPDIR) in a folder of its
    own under trainctl's cache, removed after it; yields the folder, or None where the user chose TMPDIR (or there
    is no room for a socket). For the commands that run an engine in their own process (chat, eval: vLLM writes a
    rendezvous file per engine) or start servers."""
    folder = None if os.environ.get("TMPDIR") else make()
    added = env(folder, dict(os.environ))
    saved = {name: os.environ.get(name) for name in added}
    saved_tempdir = tempfile.tempdir
    os.environ.update(added)
    if folder is not None:
        tempfile.tempdir = str(folder)
    try:
        yield folder
    finally:
        tempfile.tempdir = saved_tempdir
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        remove(folder)


def inductor_cache_dir() -> str:
    """Where torch inductor keeps its compile cache without TMPDIR (torch._inductor.runtime.cache_dir_utils)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid_{os.getuid()}"
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))
