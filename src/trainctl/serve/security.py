"""Who may reach the server and what leaves it. Launching a job runs code (reward functions, MCP server commands),
so the server is closed by default:

- it binds 127.0.0.1; a non-loopback --host without --token-env is refused at start (check_bind);
- with a token, every route needs it: `Authorization: Bearer TOKEN`, or the cookie the login page sets (an HMAC of
  the token, never the token itself), compared in constant time; 401 otherwise;
- the Host header must name this server (DNS rebinding: a page on evil.example resolved to 127.0.0.1 is refused);
- a method a path does not serve is answered 405 with an Allow header (before anything else of the request is read);
- a POST must carry a JSON body (a cross-site form cannot send one, and without CORS headers a cross-site script
  cannot either) and, when the browser says where it comes from (Origin), come from this server; GET never changes
  anything; actions are refused (403) unless the server was started with --allow-actions (routes check that);
- every response goes through the Redactor: no secret of the server's environment, the server's own token or an
  MCP server's env value reaches a page, an API answer or a stream;
- files are served only from under the runs folders (safe_path).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from trainctl.errors import TrainctlError
from trainctl.secrets import Redactor

COOKIE = "trainctl_session"
# a token shorter than this is refused at start: it could be guessed
MIN_TOKEN_LENGTH = 16
# routes that answer without the token: the login page (and its POST)
OPEN_PATHS = ("/login",)
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
# every page's policy: nothing is loaded from anywhere but this server (the charts' library is vendored)
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def new_token_hint(host: str, env: str = "TRAINCTL_SERVE_TOKEN") -> str:
    return (
        f"export {env}=\"$(python -c 'import secrets; print(secrets.token_urlsafe(32))')\"; "
        f"trainctl serve --host {host} --token-env {env}"
    )


def read_token(host: str, token_env: str | None) -> str | None:
    """The server's token (from the variable --token-env names), or None on loopback without one. Refuses a
    non-loopback host without a token, and a token that is missing or short, before anything is bound."""
    if token_env is None:
        if not is_loopback(host):
            raise TrainctlError(
                f"--host {host} would let other machines reach this server, which can start jobs and read every "
                "run; it is refused without a token.",
                hint=new_token_hint(host) + "   (or keep the default --host 127.0.0.1)",
            )
        return None
    token = os.environ.get(token_env, "")
    if not token:
        raise TrainctlError(
            f"--token-env {token_env}: the variable {token_env} is not set (or is empty).",
            hint=new_token_hint(host, token_env),
        )
    if len(token) < MIN_TOKEN_LENGTH:
        raise TrainctlError(
            f"--token-env {token_env}: the token is {len(token)} characters; at least {MIN_TOKEN_LENGTH} are needed.",
            hint=new_token_hint(host, token_env),
        )
    return token


def allowed_hosts(host: str, extra: list[str] | None = None) -> set[str]:
    """The names the Host header may carry: loopback names, the bound address, and on a wildcard bind this
    machine's names and addresses; plus --allow-host names (a reverse proxy's)."""
    names = {*LOOPBACK_NAMES, host.strip("[]").lower()}
    if host in ("0.0.0.0", "::", ""):
        names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
        try:
            import psutil

            for addrs in psutil.net_if_addrs().values():
                names |= {
                    a.address.split("%")[0].lower() for a in addrs if a.family in (socket.AF_INET, socket.AF_INET6)
                }
        except Exception:  # no interface list: the names above
            pass
    names |= {h.lower() for h in extra or []}
    return names


def host_name(value: str) -> str:
    """The name part of a Host header: `example:8765` -> example, `[::1]:8765` -> ::1."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def cookie_value(token: str) -> str:
    return hmac.new(token.encode(), b"trainctl-serve-session", hashlib.sha256).hexdigest()


@dataclass
class Secrets:
    """The values no response may carry: the server environment's secrets, the server's token and the values of
    variables that runs name as secret (an MCP server's env, a judge's key_env), added as runs are read."""

    token: str | None = None
    names: set[str] = field(default_factory=set)
    _redactor: Redactor | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def redactor(self) -> Redactor:
        if self._redactor is None:
            extra = [os.environ.get(n, "") for n in sorted(self.names)]
            self._redactor = Redactor(extra=[*(extra), *([self.token] if self.token else [])])
        return self._redactor

    def add_names(self, names: list[str]) -> None:
        new = {n for n in names if n and n not in self.names}
        if new:
            with self._lock:
                self.names |= new
                self._redactor = None

    def text(self, s: str) -> str:
        return self.redactor.text(s)


# -- ASGI middleware ---------------------------------------------------------------------------------------------


class Guard:
    """Host check, authentication and the POST rules, before any route runs; security headers on every response."""

    def __init__(self, app, token: str | None, hosts: set[str], login_page=None, methods=None):
        self.app = app
        self.login_page = login_page  # (next_path) -> the login page's HTML: trainctl.serve.pages renders it
        # (scope) -> the methods the request's path serves, None for no such path (trainctl.serve.app)
        self.methods = methods or (lambda scope: {"GET", "HEAD", "POST"})
        self.token = token
        self.cookie = cookie_value(token) if token else None
        self.hosts = hosts

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        path = scope.get("path", "")
        if host_name(headers.get("host", "")) not in self.hosts:
            return await _plain(
                send,
                400,
                "Invalid Host header: this server answers to 127.0.0.1 and localhost "
                "(start it with --allow-host NAME to add one).",
            )
        if self.token and path not in OPEN_PATHS and not self._authorized(headers):
            return await self._unauthorized(scope, headers, send)
        allowed = self.methods(scope)
        if allowed is not None and scope["method"] not in allowed:  # the path says what it serves, first
            allow = ", ".join(sorted(allowed))
            refused = {"error": f"{scope['method']} is not served here.", "hint": f"Allow: {allow}"}
            return await _json(send, 405, refused, [(b"allow", allow.encode())])
        if scope["method"] not in ("GET", "HEAD", "POST"):
            return await _plain(send, 405, "Only GET and POST are served.", [(b"allow", b"GET, HEAD, POST")])
        if scope["method"] == "POST":
            origin = headers.get("origin")
            if origin and origin != "null" and host_name(urlsplit(origin).netloc) not in self.hosts:
                return await _json(send, 403, {"error": f"cross-origin request from {origin} refused"})
            if origin == "null":
                return await _json(send, 403, {"error": "a request from an opaque origin is refused"})
            kind = headers.get("content-type", "").split(";")[0].strip().lower()
            form_login = path in OPEN_PATHS and kind == "application/x-www-form-urlencoded"
            if kind != "application/json" and not form_login:
                return await _json(
                    send, 415, {"error": "a POST must carry a JSON body (Content-Type: application/json)"}
                )

        async def with_headers(message):
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)

    def _authorized(self, headers: dict[str, str]) -> bool:
        auth = headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            return hmac.compare_digest(auth[7:].strip().encode(), self.token.encode())
        for part in headers.get("cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE:
                return hmac.compare_digest(value.encode(), self.cookie.encode())
        return False

    async def _unauthorized(self, scope, headers, send):
        path = scope.get("path", "")
        wants_html = "text/html" in headers.get("accept", "") and not path.startswith(("/api/", "/metrics"))
        if wants_html and scope["method"] == "GET" and self.login_page is not None:
            body = self.login_page(next_path=path).encode()
            return await _send(send, 401, body, b"text/html; charset=utf-8", [(b"www-authenticate", b"Bearer")])
        return await _json(
            send,
            401,
            {"error": "a token is needed", "hint": "Authorization: Bearer TOKEN, or log in at /login"},
            [(b"www-authenticate", b"Bearer")],
        )


class Redact:
    """Every response body through the Redactor: whole bodies are redacted at once, a stream (SSE) event by event
    (the server yields whole events)."""

    def __init__(self, app, secrets: Secrets):
        self.app = app
        self.secrets = secrets

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        state: dict = {"start": None, "body": [], "stream": False}
        redactor = self.secrets.redactor

        async def redacting(message):
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers", []))
                state["stream"] = headers.get(b"content-type", b"").startswith(b"text/event-stream")
                if state["stream"]:
                    await send(message)
                else:
                    state["start"] = message
                return
            if message["type"] != "http.response.body":
                return await send(message)
            body = message.get("body", b"")
            if state["stream"]:
                return await send({**message, "body": redactor.bytes(body) if body else body})
            state["body"].append(body)
            if message.get("more_body"):
                return
            data = redactor.bytes(b"".join(state["body"]))
            start = state["start"]
            start["headers"] = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            start["headers"].append((b"content-length", str(len(data)).encode()))
            await send(start)
            await send({"type": "http.response.body", "body": data})

        await self.app(scope, receive, redacting)


async def _send(send, status: int, body: bytes, kind: bytes, extra=()):
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", kind),
                (b"content-length", str(len(body)).encode()),
                *extra,
                *SECURITY_HEADERS,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _plain(send, status: int, text: str, extra=()):
    await _send(send, status, text.encode(), b"text/plain; charset=utf-8", extra)


async def _json(send, status: int, data: dict, extra=()):
    import json

    await _send(send, status, json.dumps(data).encode(), b"application/json", extra)


# -- files -------------------------------------------------------------------------------------------------------


def safe_path(base: Path, relative: str, raw: bytes | None = None) -> Path | None:
    """The file `relative` names under `base`, or None: an absolute path, a `..`, an encoded slash or backslash,
    a NUL, or anything whose real path (symlinks followed) leaves `base` is refused."""
    if raw is not None and any(bad in raw.lower() for bad in (b"%2f", b"%5c", b"%00", b"%2e%2e")):
        return None
    if not relative or "\x00" in relative or "\\" in relative or relative.startswith("/"):
        return None
    if any(part in ("..", ".", "") for part in relative.split("/")):
        return None
    base = base.resolve()
    try:
        target = (base / relative).resolve(strict=True)
        target.relative_to(base)
    except (OSError, ValueError, RuntimeError):
        return None
    return target
