"""MCP servers as verl tools, inside the trainer's worker processes: every tool an MCP server lists becomes a
`verl.tools.base_tool.BaseTool` (verl 0.9.1 has no MCP support: it was removed in verl PR #6300).

verl instantiates `MCPTool` once per tool in each agent-loop worker, from the entries of <run>/tools.yaml that
trainctl.backends.tools wrote from the plan's checked servers and listings (trainctl.mcp). The first call connects;
every call has a timeout; a call that fails, times out or finds the server gone or unusable returns an error text to
the model (the trajectory goes on) and never raises out of `execute`. Nothing here validates a config: what can be
wrong with a server entry was reported at plan time (trainctl.checks.tools), and whatever changed since (an
mcpServers file edited or removed, a variable missing from a worker's environment) is the call's error result.

Why a thread with its own event loop: an MCP connection is a set of anyio tasks owned by the task that opened it
(trainctl.mcp.connection), and verl calls tools from its own loop inside Ray actors (and from worker threads while
it builds datasets). One long-lived loop per process owns every connection; callers on any loop or thread submit
coroutines to it. stdio servers started here stop when the process exits (atexit; stdin closes on a kill).

verl names the tool class by dotted path in tools.yaml, and run folders keep theirs: resuming a run reads its
tools.yaml, so `trainctl.runtime.mcp_bridge.MCPTool` must stay importable under this name.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import functools
import os
import threading
import time
import uuid
import weakref
from typing import Any

from trainctl.errors import ConfigProblems, TrainctlError
from trainctl.mcp.connection import (
    CLOSE_TIMEOUT,
    CONNECTION_CLOSED,
    DEFAULT_CALL_TIMEOUT,
    DEFAULT_CONNECT_TIMEOUT,
    REQUEST_TIMEOUT,
    Connection,
    error_code,
    explain,
)
from trainctl.mcp.results import error_text, result_text
from trainctl.mcp.specs import ServerSpec, load_servers
from trainctl.runtime.lazy import lazy_classes
from trainctl.runtime.tool_calls import CallLog


class ToolCallError(Exception):
    """A call that did not produce a result (timeout, connection lost, server unusable): its text goes to the model."""


# ----------------------------------------------------------------------------------------------------------------
# The process's bridge: one event loop thread owning every connection
# ----------------------------------------------------------------------------------------------------------------


class Bridge:
    """The process's MCP connections and the event loop thread that owns them (get one with `bridge()`)."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="trainctl-mcp-bridge", daemon=True)
        self._thread.start()
        self._connections: dict[Any, Connection] = {}
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
    async def connection(self, key: Any, spec: ServerSpec, timeout: float) -> Connection:
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
            conn = Connection(spec)
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
# Calls
# ----------------------------------------------------------------------------------------------------------------


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
            code = error_code(e)
            if code == REQUEST_TIMEOUT:  # the SDK also told the server to cancel it
                raise ToolCallError(f"the call to {tool!r} timed out after {timeout:g} s") from None
            if not conn.alive or code == CONNECTION_CLOSED:
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


def worker_spec(config: dict) -> ServerSpec:
    """The server a tools.yaml entry names: the checked entry itself (`server_spec`), or the server of that name in
    the user's mcpServers file (`servers_file`: its env and headers stay there). The plan checked both; a file that
    has changed since is a ToolCallError (the call's error result), never a config error in the worker."""
    name = config["server"]
    if config.get("server_spec"):
        return ServerSpec.from_json(name, dict(config["server_spec"]))
    path = str(config.get("servers_file"))
    try:
        servers = _servers_from_file(path)
    except ConfigProblems as e:
        raise ToolCallError(f"MCP server {name!r} is unavailable: {e.problems[0].message}") from None
    except TrainctlError as e:
        raise ToolCallError(f"MCP server {name!r} is unavailable: {e.message}") from None
    if name not in servers:
        raise ToolCallError(
            f"MCP server {name!r} is unavailable: {path} no longer names it (it names {sorted(servers)})"
        )
    return servers[name]


# ----------------------------------------------------------------------------------------------------------------
# The tool class verl instantiates
# ----------------------------------------------------------------------------------------------------------------


def _mcp_tool_class():
    from verl.tools.base_tool import BaseTool
    from verl.tools.schemas import ToolResponse

    class MCPTool(BaseTool):
        """One tool of one MCP server, as verl's tool agent loop calls it (config: trainctl.backends.tools).

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
                self._spec = worker_spec(self.config)
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
                    text = error_text(text)
            except asyncio.CancelledError:
                raise
            except ToolCallError as e:
                text = error_text(str(e))
            except Exception as e:  # anything else is a bug here or in the SDK: the model still gets an answer
                text = error_text(f"the call to {self.name!r} failed: {type(e).__name__}: {e}")
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

    return MCPTool


# verl imports tool classes by dotted path (tool_registry.get_tool_class); the class is built on first use so that
# nothing here imports verl until a worker asks for it
CLASS_NAME = f"{__name__}.MCPTool"
__getattr__ = lazy_classes(__name__, {"MCPTool": _mcp_tool_class})
