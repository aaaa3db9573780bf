"""A ModelScope hub on 127.0.0.1: the legacy /api/v1 paths the modelscope client calls to download a model.

    GET  /api/v1/models/{repo}                              repository metadata
    GET  /api/v1/models/{repo}/revisions                    branches and tags
    GET  /api/v1/models/{repo}/repo/files?Revision=&...     the file listing (Path, Size, Sha256)
    HEAD/GET /api/v1/models/{repo}/repo?Revision=&FilePath= the file, honouring Range

Responses use ModelScope's envelope ({"Code": 200, "Data": ..., "Success": true}). Every request is recorded.
"""

from __future__ import annotations

import hashlib
import json
import re
from urllib.parse import parse_qs, unquote, urlparse

from tests.models.local_server import LocalServer


class FakeModelScope(LocalServer):
    def __init__(self) -> None:
        self.repos: dict[str, dict[str, bytes]] = {}
        self.requests: list[tuple[str, str]] = []
        super().__init__()

    def _json(self, h, code: int, data, success: bool = True) -> None:
        body = json.dumps({"Code": code, "Data": data, "Success": success, "Message": "" if success else data}).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(body)

    def _handle(self, h, head: bool) -> None:
        url = urlparse(h.path)
        path, query = unquote(url.path), {k: v[0] for k, v in parse_qs(url.query).items()}
        self.requests.append((h.command, h.path))
        m = re.fullmatch(r"/api/v1/models/([^/]+/[^/]+)(/.*)?", path)
        if not m:
            self._json(h, 404, "not found", success=False)
            return
        repo_id, rest = m[1], m[2] or ""
        files = self.repos.get(repo_id)
        if files is None:
            self._json(h, 404, f"model {repo_id} not exists", success=False)
            return
        if rest == "":
            self._json(h, 200, {"Name": repo_id.split("/")[1], "Path": repo_id.split("/")[0], "Id": 1})
        elif rest == "/revisions":
            self._json(h, 200, {"RevisionMap": {"Branches": [{"Revision": "master"}], "Tags": []}})
        elif rest == "/repo/files":
            entries = [
                {
                    "Name": p.rsplit("/", 1)[-1],
                    "Path": p,
                    "Size": len(b),
                    "Sha256": hashlib.sha256(b).hexdigest(),
                    "Type": "blob",
                    "Revision": "master",
                }
                for p, b in sorted(files.items())
            ]
            self._json(h, 200, {"Files": entries})
        elif rest == "/repo":
            name = query.get("FilePath", "")
            if name not in files:
                self._json(h, 404, f"file {name} not exists", success=False)
                return
            data = files[name]
            start = 0
            rng = h.headers.get("Range")
            if rng:
                start = int(re.match(r"bytes=(\d+)-", rng)[1])
            body = data[start:]
            h.send_response(206 if start else 200)
            h.send_header("Content-Length", str(len(body)))
            h.send_header("Accept-Ranges", "bytes")
            if start:
                h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            h.end_headers()
            if not head:
                h.wfile.write(body)
        else:
            self._json(h, 404, "not found", success=False)
