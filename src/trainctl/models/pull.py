"""`trainctl model pull`: a model from the Hugging Face hub or ModelScope into the folder its name points at.

The sequence: resolve the revision to a commit, list the repository's files at that commit (with sizes), choose the
files a trainer needs (safetensors weights, config, tokenizer, chat template; not the same weights again as .bin,
.pth, .gguf or original/), check the disk has room, download them with the hub's own client (which resumes from
its partial files and uses the hub's fast transfer backend when the repository has one), then verify: every file
at the listed size, every shard the weights index names, config and tokenizer loading. A manifest records what
was pulled. Tokens come from the environment (HF_TOKEN, MODELSCOPE_API_TOKEN) or the hub's own login, and are never
written or printed.
"""

from __future__ import annotations

import errno
import fnmatch
import glob
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from trainctl.models.catalog import MANIFEST, ModelError, ModelRef, read_manifest, resolve_ref, write_manifest
from trainctl.models.download import SizeMismatch
from trainctl.models.tiny import BUILT

if TYPE_CHECKING:
    from trainctl.config.search import SearchPath

SOURCES = ("auto", "hf", "modelscope")
# the disk (or a quota, or a file size limit) is full: keep what was downloaded, say how to resume
FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
# what a trainer needs
TAKE = [
    "*.safetensors",
    "*.json",
    "*.jinja",
    "*.txt",
    "*.model",
    "*.tiktoken",
    "*.py",
    "*.md",
    "LICENSE*",
    "tokenizer*",
]
# the same weights in other formats, and files no trainer reads
SKIP = [
    "*.bin",
    "*.bin.index.json",
    "*.pth",
    "*.pt",
    "*.ckpt",
    "*.gguf",
    "*.onnx",
    "*.onnx_data",
    "*.h5",
    "*.msgpack",
    "*.ot",
    "*.tflite",
    "original/*",
    "onnx/*",
    "openvino/*",
    "coreml/*",
    ".gitattributes",
]


@dataclass(frozen=True)
class RemoteFile:
    path: str
    size: int
    sha256: str | None = None
    xet: bool = False  # stored on the hub's Xet backend (downloaded by hf_xet, in chunks it caches)


@dataclass
class PullResult:
    ref: ModelRef
    source: str  # "Hugging Face" or "ModelScope"
    endpoint: str
    repo: str
    revision: str
    commit: str
    files: list[RemoteFile]
    to_download: int  # bytes not yet on disk
    notes: list[str] = field(default_factory=list)
    dry_run: bool = False

    @property
    def total(self) -> int:
        return sum(f.size for f in self.files)


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def select(files: list[RemoteFile], include: list[str]) -> tuple[list[RemoteFile], list[str]]:
    """The files to download, and notes on what was left out or added."""
    notes = []
    take, skip = list(TAKE), list(SKIP)
    if not any(f.path.endswith(".safetensors") for f in files) and any(f.path.endswith(".bin") for f in files):
        # an older repository without safetensors: its .bin files are the weights
        take += ["*.bin", "*.bin.index.json"]
        skip = [s for s in skip if s not in ("*.bin", "*.bin.index.json")]
        notes.append("no safetensors weights in the repository: taking its .bin files")

    def matches(path: str, patterns: list[str]) -> bool:
        return any(fnmatch.fnmatch(path, p) or fnmatch.fnmatch(Path(path).name, p) for p in patterns)

    chosen, left = [], []
    for f in files:
        wanted = matches(f.path, take) and not matches(f.path, skip)
        if wanted or (include and matches(f.path, include)):
            chosen.append(f)
        elif not f.path.startswith("."):
            left.append(f)
    if left:
        size = sum(f.size for f in left)
        shown = ", ".join(f.path for f in left[:4]) + (", ..." if len(left) > 4 else "")
        notes.append(f"left out {len(left)} files ({human(size)}): {shown} (--include GLOB to take them)")
    return chosen, notes


def reachable(url: str) -> bool:
    from trainctl.data.sources import reachable as tcp_reachable

    return tcp_reachable(url)


def _first_line(e: Exception) -> str:
    return _redact(str(e).splitlines()[0][:200] if str(e) else type(e).__name__)


def _redact(text: str) -> str:
    from trainctl.secrets import Redactor

    return Redactor().text(text)


# -- the two hubs ----------------------------------------------------------------------------------------------------


class HuggingFace:
    title = "Hugging Face"

    def __init__(self) -> None:
        self.endpoint = (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")

    def token(self) -> str | None:
        if os.environ.get("HF_TOKEN"):
            return os.environ["HF_TOKEN"]
        from huggingface_hub import get_token

        return get_token()

    def offline(self) -> str | None:
        if os.environ.get("HF_HUB_OFFLINE", "0").lower() not in ("0", "", "false", "no"):
            return "HF_HUB_OFFLINE is set"
        return None if reachable(self.endpoint) else "it does not answer"

    def _error(self, e: Exception, repo: str, revision: str) -> ModelError:
        from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

        status = getattr(getattr(e, "response", None), "status_code", None)
        has_token = bool(self.token())
        if isinstance(e, GatedRepoError) or (status in (401, 403) and not isinstance(e, RepositoryNotFoundError)):
            return ModelError(
                f"{repo} on {self.endpoint} is gated or private, and "
                + ("the token you have is not granted access." if has_token else "no token was sent."),
                hint=f"accept its terms at {self.endpoint}/{repo}, then set HF_TOKEN (or run `hf auth login`); "
                "or pull it from ModelScope: --source modelscope",
            )
        if isinstance(e, RevisionNotFoundError):
            return ModelError(
                f"{repo} has no revision {revision!r} on {self.endpoint}.",
                hint="--revision takes a branch, a tag or a commit hash (main when not given)",
            )
        if isinstance(e, RepositoryNotFoundError) or status == 404:
            return ModelError(
                f"{repo} was not found on {self.endpoint}"
                + ("." if has_token else " (or it is private and no token was sent)."),
                hint="check the repository id, set HF_TOKEN for a private one, or try --source modelscope",
            )
        return ModelError(
            f"cannot talk to {self.endpoint} about {repo}: {_first_line(e)}",
            hint="run the same command again (it resumes), set HF_ENDPOINT to a mirror, or try --source modelscope",
        )

    def resolve(self, repo: str, revision: str | None) -> tuple[str, list[RemoteFile]]:
        from huggingface_hub import HfApi
        from huggingface_hub.hf_api import RepoFile

        api = HfApi(endpoint=self.endpoint, token=self.token() or False)
        revision = revision or "main"
        try:
            commit = api.model_info(repo, revision=revision).sha
            files = [
                RemoteFile(f.path, f.size, f.lfs.sha256 if f.lfs else None, bool(f.xet_hash))
                for f in api.list_repo_tree(repo, revision=commit, recursive=True)
                if isinstance(f, RepoFile)
            ]
        except Exception as e:
            raise self._error(e, repo, revision) from None
        return commit, files

    def download(
        self, repo: str, commit: str, target: Path, files: list[RemoteFile], progress: Callable[[int], None] | None
    ) -> None:
        """Xet-backed files through huggingface_hub and hf_xet (the hub's fast backend, with its chunk cache); every
        other file by a resumable GET of the URL huggingface_hub builds, with its headers and HTTP session."""
        import httpx
        from huggingface_hub import hf_hub_download, hf_hub_url
        from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status
        from huggingface_hub.utils._runtime import is_xet_available

        from trainctl import __version__
        from trainctl.models.download import Job, fetch, fetch_all, part_path

        token = self.token() or False
        headers = build_hf_headers(token=token, library_name="trainctl", library_version=__version__)
        headers["Accept-Encoding"] = "identity"  # the listed sizes are of the bytes, not of a compressed body
        client = get_session()
        xet = is_xet_available()

        def run(f: RemoteFile, advance: Callable[[int], None]) -> None:
            if f.xet and xet:
                self.forget(target, f.path)
                hf_hub_download(repo, f.path, revision=commit, local_dir=target, endpoint=self.endpoint, token=token)
                advance(f.size)
                return
            url = hf_hub_url(repo, f.path, revision=commit, endpoint=self.endpoint)
            job = Job(url, target / f.path, f.size, f.path)
            fetch(client, job, part_path(target, f.path), headers, hf_raise_for_status, advance)

        try:
            fetch_all(files, run, progress)
        except SizeMismatch:
            raise
        except OSError as e:
            if e.errno in FULL:
                raise
            raise self._error(e, repo, commit) from None
        except (httpx.HTTPError, Exception) as e:
            raise self._error(e, repo, commit) from None

    @staticmethod
    def forget(target: Path, rel: str) -> None:
        """Make a file be fetched again: the hub client trusts its own record of a finished download."""
        (target / rel).unlink(missing_ok=True)
        (target / ".cache" / "huggingface" / "download" / f"{rel}.metadata").unlink(missing_ok=True)


class ModelScope:
    title = "ModelScope"

    def __init__(self) -> None:
        domain = os.environ.get("MODELSCOPE_DOMAIN") or "modelscope.cn"
        self.endpoint = (domain if "://" in domain else f"https://{domain}").rstrip("/")

    def token(self) -> str | None:
        return os.environ.get("MODELSCOPE_API_TOKEN") or None

    def offline(self) -> str | None:
        return None if reachable(self.endpoint) else "it does not answer"

    def _error(self, e: Exception, repo: str) -> ModelError:
        text = _redact(f"{type(e).__name__}: {e}")
        if "404" in text or "NotExist" in text or "not found" in text.lower():
            return ModelError(f"{repo} was not found on ModelScope ({self.endpoint}).", hint="check the repository id")
        if "401" in text or "403" in text:
            return ModelError(
                f"{repo} on ModelScope needs a token.", hint="set MODELSCOPE_API_TOKEN (from modelscope.cn, My Tokens)"
            )
        return ModelError(
            f"cannot download {repo} from ModelScope ({self.endpoint}): {text.splitlines()[0][:200]}",
            hint="run the same command again (it resumes), or try --source hf",
        )

    def _api(self):
        from modelscope.hub.api import HubApi

        return HubApi(endpoint=self.endpoint, token=self.token())

    def resolve(self, repo: str, revision: str | None) -> tuple[str, list[RemoteFile]]:
        revision = revision or "master"
        try:
            entries = self._api().get_model_files(repo, revision=revision, recursive=True)
        except Exception as e:
            raise self._error(e, repo) from None
        files = [
            RemoteFile(e["Path"], int(e.get("Size") or 0), e.get("Sha256"))
            for e in entries
            if e.get("Type", "blob") != "tree"
        ]
        # ModelScope pins nothing finer than the revision name in its listing
        return revision, files

    def download(
        self, repo: str, commit: str, target: Path, files: list[RemoteFile], progress: Callable[[int], None] | None
    ) -> None:
        """modelscope's own client (it resumes from its partial files)."""
        from modelscope.hub.snapshot_download import snapshot_download

        for f in files:
            self.forget(target, f.path)
        try:
            snapshot_download(
                repo,
                revision=commit,
                local_dir=str(target),
                allow_patterns=[glob.escape(f.path) for f in files],
                endpoint=self.endpoint,
                token=self.token(),
            )
        except OSError as e:
            if e.errno in FULL:
                raise
            raise self._error(e, repo) from None
        except Exception as e:
            raise self._error(e, repo) from None
        if progress:
            progress(sum(f.size for f in files))

    @staticmethod
    def forget(target: Path, rel: str) -> None:
        (target / rel).unlink(missing_ok=True)


# -- choosing, checking, verifying -----------------------------------------------------------------------------------


def choose_source(ref: ModelRef, source: str) -> tuple[HuggingFace | ModelScope, str, list[str]]:
    """The hub to pull from, the repository there, and notes (auto says which it chose and why)."""
    if source not in SOURCES:
        raise ModelError(f"--source {source}: choose one of {', '.join(SOURCES)}.")
    if not ref.hf_repo and not ref.ms_repo:
        raise ModelError(
            f"{ref.name} is on no hub: it is built locally.",
            hint=f"trainctl model init {ref.name}" if ref.name in BUILT else "set hf_repo or ms_repo in its option",
        )
    if source == "hf" or (source == "auto" and ref.hf_repo):
        hub = HuggingFace()
        if not ref.hf_repo:
            raise ModelError(f"{ref.name} names no Hugging Face repository.", hint="--source modelscope")
        why = hub.offline()
        if why is None:
            return hub, ref.hf_repo, []
        if source == "hf" or not ref.ms_repo:
            raise ModelError(
                f"cannot reach the Hugging Face hub at {hub.endpoint} ({why}).",
                hint="set HF_ENDPOINT to a mirror"
                + (", or --source modelscope" if ref.ms_repo else "")
                + "; or copy the model folder here and pass its path to model.path",
            )
        fallback = ModelScope()
        if fallback.offline():
            raise ModelError(
                f"cannot reach the Hugging Face hub at {hub.endpoint} ({why}) nor ModelScope at {fallback.endpoint}.",
                hint="set HF_ENDPOINT (or MODELSCOPE_DOMAIN) to a mirror you can reach",
            )
        return (
            fallback,
            ref.ms_repo,
            [f"the Hugging Face hub at {hub.endpoint} cannot be reached ({why}): using ModelScope"],
        )
    hub = ModelScope()
    if not ref.ms_repo:
        raise ModelError(f"{ref.name} names no ModelScope repository.", hint="--source hf")
    if hub.offline():
        raise ModelError(
            f"cannot reach ModelScope at {hub.endpoint}.",
            hint="set MODELSCOPE_DOMAIN to a mirror" + (", or --source hf" if ref.hf_repo else ""),
        )
    return hub, ref.ms_repo, []


def missing_bytes(target: Path, files: list[RemoteFile]) -> int:
    from trainctl.models.download import part_path

    need = 0
    for f in files:
        p = target / f.path
        if not (p.is_file() and p.stat().st_size == f.size):
            part = part_path(target, f.path)
            need += f.size - (part.stat().st_size if part.is_file() and part.stat().st_size <= f.size else 0)
    return need


def _sha256(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def stale(target: Path, files: list[RemoteFile], checksum: bool = False) -> list[RemoteFile]:
    """The files that are not on disk as the hub lists them (missing, another size, or another hash)."""
    out = []
    for f in files:
        p = target / f.path
        if not p.is_file() or p.stat().st_size != f.size or (checksum and f.sha256 and _sha256(p) != f.sha256):
            out.append(f)
    return out


def check_space(target: Path, need: int) -> None:
    probe = target
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    # a margin for the partial files and the hub client's metadata
    if need > free * 0.98:
        raise ModelError(
            f"not enough disk space at {probe}: the download needs {human(need)}, {human(free)} is free.",
            hint="free some space, or pull somewhere else: --dir /path/with/room (and point model.path there)",
        )


def verify(target: Path, files: list[RemoteFile], checksum: bool = False) -> list[str]:
    """What is wrong with a pulled folder: files missing or at the wrong size (or hash), shards the index names
    that are absent. Empty when it is whole."""
    problems = []
    for f in files:
        p = target / f.path
        if not p.is_file():
            problems.append(f"{f.path} is missing")
        elif p.stat().st_size != f.size:
            problems.append(f"{f.path} is {p.stat().st_size:,} bytes; the hub lists {f.size:,}")
        elif checksum and f.sha256:
            digest = _sha256(p)
            if digest != f.sha256:
                problems.append(f"{f.path} has sha256 {digest[:12]}...; the hub lists {f.sha256[:12]}...")
    for index in target.glob("*.index.json"):
        try:
            shards = set(json.loads(index.read_text()).get("weight_map", {}).values())
        except ValueError:
            problems.append(f"{index.name} is not valid JSON")
            continue
        problems += [f"{index.name} names {s}, which is not here" for s in sorted(shards) if not (target / s).is_file()]
    return problems


def check_loads(target: Path) -> list[str]:
    """Config and tokenizer load with transformers, as every trainer will load them."""
    problems = []
    from transformers import AutoConfig, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    try:
        AutoConfig.from_pretrained(target)
    except Exception as e:
        problems.append(f"config.json does not load: {str(e).splitlines()[0][:200]}")
    try:
        AutoTokenizer.from_pretrained(target)
    except Exception as e:
        problems.append(f"the tokenizer does not load: {str(e).splitlines()[0][:200]}")
    return problems


def pull(
    name: str,
    source: str = "auto",
    revision: str | None = None,
    out: Path | None = None,
    include: list[str] | None = None,
    dry_run: bool = False,
    checksum: bool = False,
    status: Callable[[str], None] | None = None,
    progress: Callable[..., None] | None = None,
    search: SearchPath | None = None,
) -> PullResult:
    """Pull a model; `status` receives notes as they happen, `progress(n)` the bytes as they arrive (and
    `progress(0, total=N)` the bytes to come, before they do)."""
    say = status or (lambda _msg: None)
    ref = resolve_ref(name, out, search)
    hub, repo, notes = choose_source(ref, source)
    commit, listing = hub.resolve(repo, revision)
    files, select_notes = select(listing, include or [])
    notes += select_notes
    if not files:
        raise ModelError(f"nothing to download from {repo}: no file matches.", hint="--include GLOB")
    target = ref.path
    previous = read_manifest(target)
    if previous.get("commit") and previous.get("commit") != commit and previous.get("complete"):
        notes.append(f"replacing {previous.get('revision', '?')} ({previous['commit'][:12]}) with {commit[:12]}")
    for note in notes:
        say(f"note: {note}")
    result = PullResult(
        ref, hub.title, hub.endpoint, repo, revision or "", commit, files, missing_bytes(target, files), notes, dry_run
    )
    if dry_run:
        return result
    check_space(target, result.to_download)
    target.mkdir(parents=True, exist_ok=True)
    manifest = {
        "name": ref.name,
        "repo": repo,
        "hf_repo": ref.hf_repo,
        "ms_repo": ref.ms_repo,
        "source": hub.title,
        "endpoint": hub.endpoint,
        "revision": revision or ("main" if hub.title == "Hugging Face" else "master"),
        "commit": commit,
        "files": {f.path: f.size for f in files},
        "complete": False,
    }
    write_manifest(target, manifest)
    started = time.monotonic()
    try:
        todo = stale(target, files, checksum)
        say(
            f"downloading {len(todo)} of {len(files)} files ({human(sum(f.size for f in todo))} of "
            f"{human(result.total)}) from {hub.title} into {target}"
        )
        if progress:
            progress(0, total=sum(f.size for f in todo))
        hub.download(repo, commit, target, todo, progress)
        problems = verify(target, files, checksum)
        if problems:
            say(f"fetching again: {'; '.join(problems[:3])}")
            again = stale(target, files, checksum)
            if progress:
                progress(0, total=sum(f.size for f in todo) + sum(f.size for f in again))
            hub.download(repo, commit, target, again, progress)
            problems = verify(target, files, checksum)
    except SizeMismatch as e:
        problems = [str(e)]
    except OSError as e:
        if e.errno in FULL:
            raise ModelError(
                f"downloading into {target} stopped: {_why_full(e, target)}. What was downloaded is kept.",
                hint="make room and run the same command again: it resumes where it stopped",
            ) from None
        raise
    if problems:
        raise ModelError(
            f"the download into {target} does not match {repo} at {commit[:12]}:",
            details=problems,
            hint="run the same command again; if it persists, the hub's copy is inconsistent (report it there)",
        )
    problems = check_loads(target)
    if problems:
        raise ModelError(f"{target} downloaded whole, but does not load:", details=problems)
    manifest.update(complete=True, seconds=round(time.monotonic() - started, 1))
    write_manifest(target, manifest)
    return result


def _why_full(e: OSError, target: Path) -> str:
    if e.errno == errno.EFBIG:
        return "a file grew past this process's file size limit (ulimit -f)"
    probe = target if target.exists() else target.parent
    return f"the disk filled up ({human(shutil.disk_usage(probe).free)} free now)"


def remove(name: str, search: SearchPath | None = None) -> list[Path]:
    """Delete a model folder trainctl made (it has a manifest) or one a model option points at, and the option file
    an import under a name of one's own wrote (nothing would pull it again); returns what was removed."""
    from trainctl.models.catalog import imported_option

    ref = resolve_ref(name, search=search)
    target = ref.path
    option = imported_option(name, search) if ref.option else None
    if not target.exists() and option is None:
        raise ModelError(f"{ref.label} is not on disk ({target}).", hint="trainctl model ls")
    if target.exists() and not (target / MANIFEST).is_file() and not ref.option:
        raise ModelError(
            f"{target} was not made by trainctl (no {MANIFEST}): not removing it.",
            hint=f"remove it yourself: rm -r {target}",
        )
    removed = []
    if target.exists():
        shutil.rmtree(target)
        removed.append(target)
    if option is not None:
        option.unlink()
        removed.append(option)
    return removed
