"""MCP servers as verl tools: every tool an MCP server lists becomes a `verl.tools.base_tool.BaseTool`.

verl 0.9.1 has no MCP support (it was removed in verl PR #6300). This bridge uses the official `mcp` SDK:

- Servers are named as in the standard `mcpServers` file (Claude Desktop, MCP Inspector):
  {"mcpServers": {NAME: {"command", "args", "env", "cwd"} | {"type": "sse" | "streamable-http", "url", "headers"}}}.
  stdio servers are started by the run (one process per worker process that calls them, or per trajectory) and
  stopped with it; sse / streamable-http servers are reached at their URL.
- `discover(servers)` connects to each server once, before training, and lists its tools; a server that cannot
  start or be reached is reported by name with the reason. `tool_config(...)` turns the listing into the YAML verl
  reads from `actor_rollout_ref.rollout.multi_turn.tool_config_path` (class_name, config, tool_schema per tool).
- At run time verl instantiates `MCPTool` once per tool in each agent-loop worker. The first call connects; every
  call has a timeout; a call that fails, times out or finds the server gone returns an error text to the model
  (the trajectory goes on) and never raises out of `execute`.

Why a thread with its own event loop: an MCP connection is a set of anyio tasks (stdio pipes, SSE stream) owned by
the task that opened it, and verl calls tools from its own loop inside Ray actors (and from worker threads while it
builds datasets). One long-lived loop per process owns every connection; callers on any loop or thread submit
coroutines to it. The same path serves plan-time discovery, tests and the benchmark.

Secrets: `env` and `headers` values may be `${VAR}` references, expanded from the environment when the server is
started; values are never printed (reprs, errors and call logs leave them out), and the generated tool config
refers to the servers file instead of copying it, or keeps only `${VAR}` references.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import functools
import json
import os
import re
import sys
import tempfile
import threading
import time
import uuid
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainctl.errors import ConfigProblems, Problem, TrainctlError

TRANSPORTS = ("stdio", "sse", "streamable-http")
# "http" is what some clients (VS Code, Cursor) call streamable HTTP
_TRANSPORT_ALIASES = {
    "http": "streamable-http",
    "streamablehttp": "streamable-http",
    "streamable_http": "streamable-http",
}
DEFAULT_CALL_TIMEOUT = 30.0
DEFAULT_CONNECT_TIMEOUT = 60.0
# how long closing a connection may take (the SDK gives a stdio server 2 s after stdin closes, then SIGTERM, SIGKILL)
CLOSE_TIMEOUT = 10.0
# a call's result as the model sees it is cut here; verl truncates again to multi_turn.max_tool_response_length
MAX_RESULT_CHARS = 100_000
# error texts the model sees
ERROR_PREFIX = "Error:"
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SECRET_OPTION = re.compile(r"(token|secret|password|passwd|api[-_]?key|credential)", re.I)
SESSION_SCOPES = ("shared", "trajectory")


# ----------------------------------------------------------------------------------------------------------------
# Server specs: the mcpServers shape, parsed and checked (no heavy imports)
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerSpec:
    """One MCP server: how to start it (stdio) or where it answers (sse / streamable-http).

    env and headers may hold secrets: they are left out of repr() and describe()."""

    name: str
    transport: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    cwd: str | None = None
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def describe(self) -> str:
        """What a person needs to recognise the server: the command line or the URL (credentials removed)."""
        if self.transport == "stdio":
            return f"stdio: {self.command_line()}"
        return f"{self.transport}: {_strip_userinfo(self.url or '')}"

    def command_line(self) -> str:
        """The stdio command, with the values of secret-looking options (--api-key X, --token=X) masked."""
        words, hide = [self.command or ""], False
        for arg in self.args:
            flag, eq, _ = arg.partition("=")
            if hide:
                words.append("***")
            elif eq and flag.startswith("-") and _SECRET_OPTION.search(flag):
                words.append(f"{flag}=***")
            else:
                words.append(arg)
            hide = not eq and arg.startswith("-") and bool(_SECRET_OPTION.search(arg))
        return " ".join(words)

    def to_json(self) -> dict:
        """The mcpServers entry, as given (env and headers included: only for files the user owns)."""
        if self.transport == "stdio":
            out: dict[str, Any] = {"command": self.command, "args": list(self.args)}
            if self.env:
                out["env"] = dict(self.env)
            if self.cwd:
                out["cwd"] = self.cwd
            return out
        out = {"type": self.transport, "url": self.url}
        if self.headers:
            out["headers"] = dict(self.headers)
        return out

    def secret_values(self) -> list[str]:
        """Expanded env and header values (to scrub from anything the server writes back)."""
        values = []
        for _, v in (*self.env, *self.headers):
            with contextlib.suppress(TrainctlError):
                values.append(_expand(v, self.name, "env"))
        return [v for v in values if len(v) >= 4]


def _strip_userinfo(url: str) -> str:
    return re.sub(r"(//)[^/@]*@", r"\1", url)


def parse_servers(data: Any, source: str = "mcpServers") -> dict[str, ServerSpec]:
    """The servers of an `mcpServers` document (already parsed), every problem reported at once."""
    if not isinstance(data, dict) or not isinstance(data.get("mcpServers"), dict):
        found = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise TrainctlError(
            f'{source}: expected an object with an "mcpServers" object inside, found {found}.',
            hint='write it as {"mcpServers": {"calc": {"command": "python", "args": ["server.py"]}}}',
        )
    servers: dict[str, ServerSpec] = {}
    problems: list[Problem] = []
    for name, entry in data["mcpServers"].items():
        try:
            servers[name] = parse_server(name, entry, source)
        except TrainctlError as e:
            problems.append(Problem(e.message, key=f"mcpServers.{name}", hint=e.hint))
    if problems:
        raise ConfigProblems(problems)
    if not servers:
        raise TrainctlError(f'{source}: "mcpServers" is empty.', hint="name at least one server")
    return servers


def parse_server(name: str, entry: Any, source: str = "mcpServers") -> ServerSpec:
    where = f"{source}: server {name!r}"
    if not isinstance(entry, dict):
        raise TrainctlError(f"{where} must be an object, not {type(entry).__name__}.")
    kind = str(entry.get("type") or entry.get("transport") or "").lower()
    kind = _TRANSPORT_ALIASES.get(kind, kind)
    if "command" in entry or kind == "stdio":
        command = entry.get("command")
        if not isinstance(command, str) or not command:
            raise TrainctlError(f'{where} has no "command" to start it with.', hint='e.g. "command": "npx"')
        args = entry.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str | int | float) for a in args):
            raise TrainctlError(f'{where}: "args" must be a list of strings.')
        env = _str_mapping(entry.get("env"), f'{where}: "env"')
        cwd = entry.get("cwd")
        return ServerSpec(name, "stdio", command=command, args=tuple(str(a) for a in args), env=env, cwd=cwd)
    url = entry.get("url")
    if not isinstance(url, str) or not re.match(r"^https?://", url):
        raise TrainctlError(
            f'{where} has neither a "command" (stdio) nor an http(s) "url" (sse / streamable-http).',
            hint='e.g. {"type": "sse", "url": "http://127.0.0.1:8001/sse"}',
        )
    if not kind:
        kind = "sse" if url.rstrip("/").endswith("/sse") else "streamable-http"
    if kind not in TRANSPORTS:
        raise TrainctlError(f'{where}: unknown "type" {entry.get("type")!r}.', hint=f"one of {', '.join(TRANSPORTS)}")
    headers = _str_mapping(entry.get("headers"), f'{where}: "headers"')
    return ServerSpec(name, kind, url=url, headers=headers)


def _str_mapping(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict) or not all(isinstance(v, str | int | float | bool) for v in value.values()):
        raise TrainctlError(f"{where} must map names to strings.")
    return tuple((str(k), str(v)) for k, v in value.items())


def load_servers(path: str | Path) -> dict[str, ServerSpec]:
    """The servers of an `mcpServers` JSON file; a file that is not valid JSON is reported with its line."""
    path = Path(path).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TrainctlError(f"MCP servers file {path} does not exist.") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        line = text.splitlines()[e.lineno - 1] if 0 < e.lineno <= len(text.splitlines()) else ""
        raise TrainctlError(
            f"MCP servers file {path} is not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}.",
            details=[f"  {e.lineno} | {line}", f"  {' ' * len(str(e.lineno))} | {' ' * (e.colno - 1)}^"],
            hint="fix the JSON (a trailing comma or a missing quote is the usual cause)",
        ) from None
    return parse_servers(data, str(path))


def _expand(value: str, server: str, what: str) -> str:
    def var(m: re.Match) -> str:
        if m.group(1) not in os.environ:
            raise TrainctlError(
                f"{what} refers to ${{{m.group(1)}}}, which is not set in the environment",
                hint=f"export {m.group(1)}=... before starting the run (server {server!r})",
            )
        return os.environ[m.group(1)]

    return _VAR.sub(var, value)


def is_reference(value: str) -> bool:
    """A value that is only `${VAR}` references (safe to write into a saved config)."""
    return bool(_VAR.search(value)) and not _VAR.sub("", value).strip()


# ----------------------------------------------------------------------------------------------------------------
# Connections, owned by one event loop thread per process
# ----------------------------------------------------------------------------------------------------------------


class ToolCallError(Exception):
    """A call that did not produce a result (timeout, connection lost, protocol error): its text goes to the model."""


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in _leaves(e)]
    return [exc]


def explain(exc: BaseException, spec: ServerSpec | None = None) -> str:
    """One line saying why a server could not be used (the innermost cause of anyio's exception groups)."""
    leaves = _leaves(exc)
    leaf = next((e for e in leaves if not isinstance(e, asyncio.CancelledError)), leaves[0])
    if isinstance(leaf, TrainctlError):
        return leaf.message
    if isinstance(leaf, FileNotFoundError) and spec is not None and spec.transport == "stdio":
        return f"the command {spec.command!r} was not found"
    if isinstance(leaf, PermissionError) and spec is not None and spec.transport == "stdio":
        return f"the command {spec.command!r} cannot be executed (permission denied)"
    if isinstance(leaf, TimeoutError):
        return str(leaf) or "it did not answer in time"
    name = type(leaf).__name__
    text = str(leaf).strip()
    if "ConnectError" in name or isinstance(leaf, ConnectionError):
        return f"nothing answers at {_strip_userinfo(spec.url or '') if spec else 'its URL'} ({text or name})"
    if "HTTPStatusError" in name:
        return f"the server answered with an HTTP error ({text.splitlines()[0] if text else name})"
    code = getattr(getattr(leaf, "error", None), "code", None)
    if code == -32000:  # CONNECTION_CLOSED: a stdio server that exits before answering
        return "the server closed the connection (it exited or crashed)"
    return f"{name}: {text}" if text else name


def _scrub(text: str, secrets: list[str]) -> str:
    for s in secrets:
        text = text.replace(s, "***")
    return text


class _Connection:
    """One live MCP client session. A task on the bridge loop holds it open until close()."""

    def __init__(self, spec: ServerSpec, stderr: Any = None):
        self.spec = spec
        self.stderr = stderr
        self.client = None
        self.broken: str | None = None
        self._closing: asyncio.Event | None = None
        self._task: asyncio.Task | None = None

    def _client(self):
        from mcp import Client

        spec = self.spec
        if spec.transport == "stdio":
            from mcp.client.stdio import StdioServerParameters, stdio_client

            env = {k: _expand(v, spec.name, f"env {k}") for k, v in spec.env}
            params = StdioServerParameters(command=spec.command, args=list(spec.args), env=env or None, cwd=spec.cwd)
            return Client(stdio_client(params, errlog=self.stderr or _stderr()))
        headers = {k: _expand(v, spec.name, f"header {k}") for k, v in spec.headers} or None
        if spec.transport == "sse":
            from mcp.client.sse import sse_client

            return Client(sse_client(spec.url, headers=headers))
        from mcp.client.streamable_http import streamable_http_client

        if headers:
            import httpx2

            return Client(streamable_http_client(spec.url, http_client=httpx2.AsyncClient(headers=headers)))
        return Client(spec.url)

    async def open(self, timeout: float) -> None:
        ready: asyncio.Future = asyncio.get_running_loop().create_future()
        self._closing = asyncio.Event()
        self._task = asyncio.create_task(self._hold(ready), name=f"mcp:{self.spec.name}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), timeout)
        except TimeoutError:
            await self.close()
            raise TimeoutError(f"it did not finish connecting within {timeout:g} s") from None

    async def _hold(self, ready: asyncio.Future) -> None:
        # enter and exit the client in this one task: anyio's task groups and cancel scopes require it
        try:
            async with self._client() as client:
                self.client = client
                ready.set_result(None)
                await self._closing.wait()
        except BaseException as e:  # the connection failed to open, or broke while open
            if not ready.done():
                ready.set_exception(e if isinstance(e, Exception) else RuntimeError(repr(e)))
            else:
                self.broken = explain(e, self.spec)
            if isinstance(e, asyncio.CancelledError):
                raise
        finally:
            self.client = None
            if not ready.done():
                ready.set_exception(RuntimeError("the connection closed while opening"))

    async def close(self) -> None:
        if self._closing is not None:
            self._closing.set()
        if self._task is not None and not self._task.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._task), CLOSE_TIMEOUT)
            except (TimeoutError, Exception):
                self._task.cancel()
                with contextlib.suppress(BaseException):
                    await self._task

    @property
    def alive(self) -> bool:
        return self.client is not None and self.broken is None and self._task is not None and not self._task.done()

    async def list_tools(self, timeout: float) -> list:
        tools, cursor = [], None
        async with asyncio.timeout(timeout):
            while True:
                page = await self.client.list_tools(cursor=cursor)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    return tools

    async def call(self, tool: str, arguments: dict, timeout: float):
        return await self.client.call_tool(tool, arguments, read_timeout_seconds=timeout)


def _stderr():
    """Where a stdio server's stderr goes: this process's stderr when it is a real file (Ray workers, the CLI)."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.fileno()
                return stream
        except (AttributeError, OSError, ValueError):
            continue
    return open(os.devnull, "w")


class Bridge:
    """The process's MCP connections and the event loop thread that owns them (get one with `bridge()`)."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="trainctl-mcp-bridge", daemon=True)
        self._thread.start()
        self._connections: dict[Any, _Connection] = {}
        self._opening: dict[Any, asyncio.Future] = {}
        self.closed = False

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro) -> concurrent.futures.Future:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro, timeout: float | None = None):
        """Run a coroutine on the bridge loop from synchronous code and wait for its result."""
        return self.submit(coro).result(timeout)

    async def acall(self, coro):
        """Run a coroutine on the bridge loop from async code on any other loop."""
        return await asyncio.wrap_future(self.submit(coro))

    # --- on the bridge loop ---
    async def connection(self, key: Any, spec: ServerSpec, timeout: float) -> _Connection:
        conn = self._connections.get(key)
        if conn is not None and conn.alive:
            return conn
        if conn is not None:  # broken (the server exited, the stream dropped): start over
            self._connections.pop(key, None)
            await conn.close()
        if key in self._opening:
            return await asyncio.shield(self._opening[key])
        opening = self.loop.create_future()
        self._opening[key] = opening
        try:
            conn = _Connection(spec)
            await conn.open(timeout)
            self._connections[key] = conn
            opening.set_result(conn)
            return conn
        except BaseException as e:
            opening.set_exception(e)
            opening.exception()  # retrieved: no "never retrieved" warning when nobody else waited
            raise
        finally:
            self._opening.pop(key, None)

    async def close_key(self, key: Any) -> None:
        conn = self._connections.pop(key, None)
        if conn is not None:
            await conn.close()

    async def close_all(self) -> None:
        conns = list(self._connections.values())
        self._connections.clear()
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)

    def open_keys(self) -> list:
        return list(self._connections)

    def shutdown(self) -> None:
        """Close every connection (stopping stdio servers) and the loop; runs at exit."""
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(Exception):
            self.run(self.close_all(), timeout=CLOSE_TIMEOUT + 5)
        self.loop.call_soon_threadsafe(self.loop.stop)


_BRIDGE: Bridge | None = None
_BRIDGE_LOCK = threading.Lock()


def _forget_after_fork() -> None:
    # a forked child (a data-loader worker) inherits the bridge object but not its thread: start afresh if needed
    global _BRIDGE, _BRIDGE_LOCK
    _BRIDGE, _BRIDGE_LOCK = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


def bridge() -> Bridge:
    """This process's bridge, started on first use; its servers stop when the process exits (atexit)."""
    global _BRIDGE
    with _BRIDGE_LOCK:
        if _BRIDGE is None or _BRIDGE.closed:
            _BRIDGE = Bridge()
            atexit.register(_BRIDGE.shutdown)
        return _BRIDGE


# ----------------------------------------------------------------------------------------------------------------
# Discovery (plan time): connect once, list the tools, report what cannot be reached
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class Discovered:
    server: ServerSpec
    tools: list  # mcp_types.Tool
    seconds: float


async def _discover_one(spec: ServerSpec, timeout: float) -> Discovered:
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as err:
        conn = _Connection(spec, stderr=err)
        try:
            await conn.open(timeout)
            tools = await conn.list_tools(timeout)
        except BaseException as e:
            reason = explain(e, spec)
            err.flush()
            err.seek(0)
            tail = [line.rstrip() for line in err.read().splitlines() if line.strip()][-5:]
            raise _Unreachable(spec, reason, [_scrub(t, spec.secret_values()) for t in tail]) from None
        finally:
            await conn.close()
    return Discovered(spec, tools, time.perf_counter() - start)


class _Unreachable(Exception):
    def __init__(self, spec: ServerSpec, reason: str, stderr_tail: list[str]):
        super().__init__(reason)
        self.spec, self.reason, self.stderr_tail = spec, reason, stderr_tail


def discover(servers: dict[str, ServerSpec], timeout: float = DEFAULT_CONNECT_TIMEOUT) -> dict[str, Discovered]:
    """Connect to every server at once, list its tools and disconnect (stdio servers are stopped again).

    Raises ConfigProblems naming each server that could not be started or reached, with the reason."""

    async def all_servers():
        return await asyncio.gather(*(_discover_one(s, timeout) for s in servers.values()), return_exceptions=True)

    results = bridge().run(all_servers())
    found, problems = {}, []
    for spec, result in zip(servers.values(), results, strict=True):
        if isinstance(result, _Unreachable):
            details = [f"{spec.describe()}"]
            if result.stderr_tail:
                details.append("its last lines on stderr:")
                details.extend(f"  {line}" for line in result.stderr_tail)
            problems.append(
                Problem(
                    f"MCP server {spec.name!r} could not be "
                    f"{'started' if spec.transport == 'stdio' else 'reached'}: {result.reason}",
                    key=f"mcpServers.{spec.name}",
                    details=details,
                    hint=_unreachable_hint(spec),
                )
            )
        elif isinstance(result, BaseException):
            problems.append(
                Problem(f"MCP server {spec.name!r}: {explain(result, spec)}", key=f"mcpServers.{spec.name}")
            )
        else:
            found[spec.name] = result
    if problems:
        raise ConfigProblems(problems)
    return found


def _unreachable_hint(spec: ServerSpec) -> str:
    if spec.transport == "stdio":
        return f"run it by hand to see it start: {spec.command_line()}"
    return f"start the server first, or fix its url (check: curl -sN {_strip_userinfo(spec.url or '')})"


# ----------------------------------------------------------------------------------------------------------------
# verl tool schemas and the tool config verl reads
# ----------------------------------------------------------------------------------------------------------------

_JSON_TYPES = ("string", "number", "integer", "boolean", "array", "object", "null")


def _property(schema: Any) -> dict:
    """One parameter in the shape verl's OpenAIFunctionPropertySchema takes (type, description, enum).

    verl keeps only those three keys; a type given through anyOf/oneOf (Optional[int] from pydantic) becomes a list
    of types, and a parameter with no type at all is passed as a string (the model writes JSON text for it)."""
    schema = schema if isinstance(schema, dict) else {}
    kind = schema.get("type")
    if kind is None:
        options = schema.get("anyOf") or schema.get("oneOf") or []
        kinds = [o.get("type") for o in options if isinstance(o, dict) and isinstance(o.get("type"), str)]
        kind = kinds[0] if len(kinds) == 1 else (kinds or None)
    if "enum" in schema and kind is None:
        kind = "string"
    if kind is None or (isinstance(kind, str) and kind not in _JSON_TYPES):
        kind = "string"
    out: dict[str, Any] = {"type": kind}
    description = schema.get("description") or schema.get("title")
    if description:
        out["description"] = str(description)
    if isinstance(schema.get("enum"), list):
        out["enum"] = schema["enum"]
    return out


def openai_tool_schema(tool: Any, name: str | None = None) -> dict:
    """An MCP tool (mcp_types.Tool or its dict) as an OpenAI function tool schema verl validates."""
    data = tool if isinstance(tool, dict) else tool.model_dump(by_alias=False, exclude_none=True)
    params = data.get("input_schema") or data.get("inputSchema") or {}
    properties = params.get("properties") or {}
    return {
        "type": "function",
        "function": {
            "name": name or data["name"],
            "description": data.get("description") or data.get("title") or data["name"],
            "parameters": {
                "type": "object",
                "properties": {k: _property(v) for k, v in properties.items()},
                "required": [r for r in params.get("required", []) if r in properties],
            },
        },
    }


CLASS_NAME = f"{__name__}.MCPTool"


def tool_config(
    discovered: dict[str, Discovered],
    *,
    servers_file: str | Path | None = None,
    timeout: float = DEFAULT_CALL_TIMEOUT,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    session: str = "shared",
    call_log_dir: str | Path | None = None,
    prefix_names: bool = False,
) -> dict:
    """The YAML document for `multi_turn.tool_config_path`: one entry per tool of every discovered server.

    With `servers_file`, each entry names its server in that file (env stays in the user's file); without it the
    server's entry is written inline, which is refused when an env or header value is a literal (a possible
    secret) instead of a `${VAR}` reference."""
    if session not in SESSION_SCOPES:
        raise TrainctlError(f"MCP session scope {session!r} is not one of {', '.join(SESSION_SCOPES)}.")
    tools, owner = [], {}
    for name, found in discovered.items():
        spec = found.server
        where: dict[str, Any]
        if servers_file is not None:
            where = {"servers_file": str(Path(servers_file).expanduser().resolve())}
        else:
            literal = [k for k, v in (*spec.env, *spec.headers) if not is_reference(v)]
            if literal:
                raise TrainctlError(
                    f"MCP server {name!r}: {', '.join(literal)} would be written into the run's tool config as "
                    "literal values.",
                    hint=f'write them as ${{VAR}} references (e.g. "{literal[0]}": "${{{literal[0]}}}") '
                    "or keep the server in an mcpServers file",
                )
            where = {"server_spec": spec.to_json()}
        for tool in found.tools:
            exposed = f"{name}__{tool.name}" if prefix_names else tool.name
            if exposed in owner:
                raise TrainctlError(
                    f"MCP tool name {exposed!r} is listed by both server {owner[exposed]!r} and server {name!r}.",
                    hint="tool names must be unique across servers: drop one server, or prefix names with the server",
                )
            owner[exposed] = name
            config = {
                "type": "native",
                "server": name,
                **where,
                "mcp_tool": tool.name,
                "timeout": float(timeout),
                "connect_timeout": float(connect_timeout),
                "session": session,
            }
            if call_log_dir is not None:
                config["call_log_dir"] = str(call_log_dir)
            tools.append({"class_name": CLASS_NAME, "config": config, "tool_schema": openai_tool_schema(tool, exposed)})
    return {"tools": tools}


def write_tool_config(path: str | Path, config: dict) -> Path:
    import yaml

    from trainctl.paths import atomic_write_text

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, yaml.safe_dump(config, sort_keys=False))
    return path


# ----------------------------------------------------------------------------------------------------------------
# Calls (run time)
# ----------------------------------------------------------------------------------------------------------------


def result_text(result: Any) -> tuple[str, bool]:
    """The text the model reads from a CallToolResult, and whether the server flagged it as an error."""
    parts = []
    for block in result.content or []:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and getattr(getattr(block, "resource", None), "text", None) is not None:
            parts.append(block.resource.text)
        else:
            parts.append(f"[{kind} content]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(parts)
    if len(text) > MAX_RESULT_CHARS:
        text = text[:MAX_RESULT_CHARS] + "...(truncated)"
    return text, bool(result.is_error)


async def call_tool(
    spec: ServerSpec,
    tool: str,
    arguments: dict,
    *,
    timeout: float = DEFAULT_CALL_TIMEOUT,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    key: Any = None,
) -> tuple[str, bool]:
    """Call one tool through the process's bridge from any event loop: (text for the model, is_error).

    Raises ToolCallError (with a one-line reason) when no result came back: the server could not be reached, the
    call timed out, or the connection broke."""
    b = bridge()
    key = key if key is not None else ("shared", spec)

    async def on_bridge():
        try:
            conn = await b.connection(key, spec, connect_timeout)
        except BaseException as e:
            if isinstance(e, asyncio.CancelledError):
                raise
            raise ToolCallError(f"MCP server {spec.name!r} is unavailable: {explain(e, spec)}") from None
        try:
            result = await conn.call(tool, arguments, timeout)
        except BaseException as e:
            if isinstance(e, asyncio.CancelledError):
                raise
            code = getattr(getattr(e, "error", None), "code", None)
            if code == -32001:  # REQUEST_TIMEOUT: the SDK also told the server to cancel it
                raise ToolCallError(f"the call to {tool!r} timed out after {timeout:g} s") from None
            if not conn.alive or code == -32000:
                await b.close_key(key)  # the next call reconnects (restarting a stdio server)
                raise ToolCallError(f"MCP server {spec.name!r} went away during the call: {explain(e, spec)}") from None
            raise ToolCallError(f"the call to {tool!r} failed: {explain(e, spec)}") from None
        return result_text(result)

    # the outer bound covers a bridge that cannot even start the call (a wedged connection)
    try:
        return await asyncio.wait_for(b.acall(on_bridge()), timeout + connect_timeout + 5)
    except TimeoutError:
        raise ToolCallError(f"the call to {tool!r} timed out after {timeout:g} s") from None


@functools.cache
def _servers_from_file(path: str) -> dict[str, ServerSpec]:
    return load_servers(path)


def spec_from_config(config: dict) -> ServerSpec:
    """The server a tool entry of the generated config names (servers_file + server, or server_spec inline)."""
    name = config["server"]
    if config.get("servers_file"):
        servers = _servers_from_file(config["servers_file"])
        if name not in servers:
            raise TrainctlError(f"MCP server {name!r} is not in {config['servers_file']} (found: {sorted(servers)}).")
        return servers[name]
    if config.get("server_spec"):
        return parse_server(name, dict(config["server_spec"]), "tool config")
    raise TrainctlError(f"MCP tool config for server {name!r} has neither servers_file nor server_spec.")


class CallLog:
    """One JSON line per call, in a file per process (workers never share a file): the record of what each
    tool was asked and answered, for trajectories and tool metrics."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self._lock = threading.Lock()

    def write(self, record: dict) -> None:
        path = self.folder / f"calls-{os.getpid()}.jsonl"
        line = json.dumps(record, ensure_ascii=False, default=str) + "\n"
        with contextlib.suppress(OSError), self._lock:  # a log that cannot be written must not stop the run
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a", encoding="utf-8") as f:
                f.write(line)


def read_call_logs(folder: str | Path) -> list[dict]:
    rows = []
    for path in sorted(Path(folder).glob("calls-*.jsonl")):
        rows.extend(json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    return rows


@functools.cache
def _tool_class():
    from verl.tools.base_tool import BaseTool
    from verl.tools.schemas import ToolResponse

    class MCPTool(BaseTool):
        """One tool of one MCP server, as verl's tool agent loop calls it (config: see `tool_config`).

        verl creates, executes and releases an instance around every single call; the MCP session behind it is
        either shared by the worker process (`session: shared`, default) or opened for each trajectory and closed
        when the trajectory ends (`session: trajectory`, for servers that keep per-client state)."""

        def __init__(self, config: dict, tool_schema):
            super().__init__(config, tool_schema)
            self.server_name = config["server"]
            self.mcp_tool = config.get("mcp_tool") or self.name
            self.timeout = float(config.get("timeout", DEFAULT_CALL_TIMEOUT))
            self.connect_timeout = float(config.get("connect_timeout", DEFAULT_CONNECT_TIMEOUT))
            self.session = config.get("session", "shared")
            self.log = CallLog(config["call_log_dir"]) if config.get("call_log_dir") else None
            self._spec: ServerSpec | None = None
            self._instances: dict[str, dict] = {}
            self._trajectories: weakref.WeakValueDictionary = weakref.WeakValueDictionary()

        def spec(self) -> ServerSpec:
            if self._spec is None:
                self._spec = spec_from_config(self.config)
            return self._spec

        async def create(self, instance_id: str | None = None, **kwargs) -> tuple[str, ToolResponse]:
            instance_id = instance_id or uuid.uuid4().hex
            self._instances[instance_id] = dict(kwargs.get("create_kwargs") or {})
            return instance_id, ToolResponse()

        def _key(self, spec: ServerSpec, instance_id: str, agent_data: Any) -> Any:
            if self.session != "trajectory":
                return ("shared", spec)
            trajectory = getattr(agent_data, "request_id", None)
            if trajectory is None:  # called outside verl's loop: the instance is the trajectory
                return ("instance", spec, instance_id)
            key = ("trajectory", spec, trajectory)
            if key not in self._trajectories and agent_data is not None:
                # the trajectory's state object goes away when verl finishes the trajectory: close its session then
                self._trajectories[key] = agent_data
                b = bridge()
                weakref.finalize(agent_data, lambda: b.closed or b.submit(b.close_key(key)))
            return key

        async def execute(
            self, instance_id: str, parameters: dict[str, Any], **kwargs
        ) -> tuple[ToolResponse, float, dict]:
            agent_data = kwargs.get("agent_data")
            start = time.perf_counter()
            error = True
            try:
                spec = self.spec()
                if not isinstance(parameters, dict):
                    raise ToolCallError(f"arguments must be a JSON object, not {type(parameters).__name__}")
                text, error = await call_tool(
                    spec,
                    self.mcp_tool,
                    parameters,
                    timeout=self.timeout,
                    connect_timeout=self.connect_timeout,
                    key=self._key(spec, instance_id, agent_data),
                )
                if error:
                    text = f"{ERROR_PREFIX} {text}" if not text.startswith(ERROR_PREFIX) else text
            except asyncio.CancelledError:
                raise
            except ToolCallError as e:
                text = f"{ERROR_PREFIX} {e}"
            except Exception as e:  # anything else is a bug here or in the SDK: the model still gets an answer
                text = f"{ERROR_PREFIX} the call to {self.name!r} failed: {type(e).__name__}: {e}"
            seconds = time.perf_counter() - start
            if self.log is not None:
                self.log.write(
                    {
                        "time": time.time(),
                        "trajectory": getattr(agent_data, "request_id", None),
                        "server": self.server_name,
                        "tool": self.name,
                        "arguments": parameters,
                        "result": text,
                        "error": bool(error),
                        "seconds": round(seconds, 6),
                    }
                )
            metrics = {"mcp_server": self.server_name, "tool_seconds": seconds, "tool_error": int(bool(error))}
            return ToolResponse(text=text), 0.0, metrics

        async def release(self, instance_id: str, **kwargs) -> None:
            self._instances.pop(instance_id, None)
            if self.session == "trajectory" and self._spec is not None:
                key = ("instance", self._spec, instance_id)
                b = bridge()
                if key in b.open_keys():
                    await b.acall(b.close_key(key))

    MCPTool.__module__ = __name__
    MCPTool.__qualname__ = "MCPTool"
    return MCPTool


def __getattr__(name: str):
    # verl imports tool classes by dotted path (tool_registry.get_tool_class); build the class on first use so
    # that plan-time discovery does not import verl
    if name == "MCPTool":
        return _tool_class()
    raise AttributeError(name)
