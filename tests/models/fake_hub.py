"""A Hugging Face hub on 127.0.0.1: the API paths `huggingface_hub` calls to download a repository.

    GET  /api/models/{repo}/revision/{rev}     repo info: the commit a branch, tag or commit resolves to
    GET  /api/models/{repo}/tree/{rev}         the file listing (paths, sizes, LFS sha256)
    HEAD /{repo}/resolve/{rev}/{path}          file metadata: commit, etag, size
    GET  /{repo}/resolve/{rev}/{path}          the bytes, honouring Range (resume)

Errors carry the hub's X-Error-Code header (RepoNotFound, GatedRepo, RevisionNotFound), as the real hub's do, so
the client raises the same exception types. Knobs for the tests: `gated` (needs a bearer token), `stall` (serve the
first N bytes of a file, then wait for an event), `drop` (close the connection after N bytes, once), `lie_sizes`
(the listing says one size, the file has another). Every request is recorded.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from urllib.parse import unquote, urlparse

from tests.models.local_server import LocalServer


@dataclass
class Commit:
    sha: str
    files: dict[str, bytes]


@dataclass
class Repo:
    commits: dict[str, Commit] = field(default_factory=dict)  # sha -> commit
    refs: dict[str, str] = field(default_factory=dict)  # branch or tag -> sha
    gated_token: str | None = None

    def add(self, files: dict[str, bytes], ref: str = "main") -> str:
        digest = hashlib.sha1(repr(sorted((k, hashlib.sha1(v).hexdigest()) for k, v in files.items())).encode())
        sha = digest.hexdigest()
        self.commits[sha] = Commit(sha, dict(files))
        self.refs[ref] = sha
        return sha

    def resolve(self, rev: str) -> Commit | None:
        sha = self.refs.get(rev, rev)
        return self.commits.get(sha)


def is_lfs(path: str) -> bool:
    return path.endswith((".safetensors", ".bin", ".gguf", ".pth", ".pt"))


class FakeHub(LocalServer):
    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.requests: list[tuple[str, str, dict]] = []
        self.stall: dict[str, int] = {}  # path -> bytes served before waiting for `release`
        self.release = threading.Event()
        self.drop: dict[str, int] = {}  # path -> bytes served before closing the connection (once)
        self.lie_sizes: dict[str, int] = {}  # path -> size the listing claims
        super().__init__()

    def __exit__(self, *exc) -> None:
        self.release.set()  # a stalled download must not hold the server's shutdown
        super().__exit__(*exc)

    def repo(self, repo_id: str) -> Repo:
        return self.repos.setdefault(repo_id, Repo())

    def ranges(self, path: str) -> list[str]:
        """The Range headers the client sent for a file's GETs."""
        return [h.get("range", "") for m, p, h in self.requests if m == "GET" and p.endswith("/" + path)]

    # -- request handling -----------------------------------------------------------------------------------------

    def _send_json(self, h, code: int, body, headers: dict | None = None) -> None:
        data = json.dumps(body).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(data)

    def _error(self, h, code: int, error_code: str, message: str) -> None:
        self._send_json(h, code, {"error": message}, {"X-Error-Code": error_code, "X-Error-Message": message})

    def _repo_or_error(self, h, repo_id: str) -> Repo | None:
        repo = self.repos.get(repo_id)
        if repo is None:
            self._error(h, 404, "RepoNotFound", "Repository not found")
            return None
        if repo.gated_token and h.headers.get("Authorization") != f"Bearer {repo.gated_token}":
            self._error(h, 401, "GatedRepo", "Access to this model is restricted. You must have access to it.")
            return None
        return repo

    def _commit_or_error(self, h, repo: Repo, rev: str) -> Commit | None:
        commit = repo.resolve(rev)
        if commit is None:
            self._error(h, 404, "RevisionNotFound", f"Invalid rev id: {rev}")
        return commit

    def _handle(self, h, head: bool) -> None:
        url = urlparse(h.path)
        path = unquote(url.path)
        self.requests.append((h.command, path, {k.lower(): v for k, v in h.headers.items()}))
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/revision/([^/]+)", path)
        if m:
            repo = self._repo_or_error(h, m[1])
            commit = repo and self._commit_or_error(h, repo, m[2])
            if commit:
                siblings = [{"rfilename": p} for p in sorted(commit.files)]
                self._send_json(h, 200, {"id": m[1], "modelId": m[1], "sha": commit.sha, "siblings": siblings})
            return
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^/]+)(/.*)?", path)
        if m:
            repo = self._repo_or_error(h, m[1])
            commit = repo and self._commit_or_error(h, repo, m[2])
            if commit:
                self._send_json(h, 200, [self._entry(p, b) for p, b in sorted(commit.files.items())])
            return
        m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if m:
            repo = self._repo_or_error(h, m[1])
            commit = repo and self._commit_or_error(h, repo, m[2])
            if commit is None:
                return
            if m[3] not in commit.files:
                self._error(h, 404, "EntryNotFound", f"{m[3]} does not exist")
                return
            self._serve_file(h, commit, m[3], head)
            return
        self._send_json(h, 404, {"error": "not found"})

    def _entry(self, path: str, data: bytes) -> dict:
        size = self.lie_sizes.get(path, len(data))
        entry = {"type": "file", "path": path, "size": size, "oid": hashlib.sha1(data).hexdigest()}
        if is_lfs(path):
            entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": size, "pointerSize": 134}
        return entry

    def _serve_file(self, h, commit: Commit, path: str, head: bool) -> None:
        data = commit.files[path]
        etag = hashlib.sha256(data).hexdigest() if is_lfs(path) else hashlib.sha1(data).hexdigest()
        start = 0
        rng = h.headers.get("Range")
        if rng:
            start = int(re.match(r"bytes=(\d+)-", rng)[1])
        body = data[start:]
        h.send_response(206 if start else 200)
        h.send_header("X-Repo-Commit", commit.sha)
        h.send_header("ETag", f'"{etag}"')
        h.send_header("Accept-Ranges", "bytes")
        h.send_header("Content-Length", str(len(body)))
        if start:
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        h.end_headers()
        if head:
            return
        cut = self.drop.pop(path, None)
        if cut is not None and cut > start:
            h.wfile.write(body[: cut - start])
            h.wfile.flush()
            h.close_connection = True
            h.connection.shutdown(2)
            return
        stall = self.stall.get(path)
        if stall is not None and not self.release.is_set() and stall > start:
            h.wfile.write(body[: stall - start])
            h.wfile.flush()
            self.release.wait(60)
            h.close_connection = True
            h.connection.shutdown(2)
            return
        h.wfile.write(body)
