"""MCP servers as verl tools, inside the trainer's worker processes: every tool an MCP server lists becomes a
`verl.tools.base_tool.BaseTool` (verl 0.9.1 has no MCP support: it was removed in verl PR #6300).

verl instantiates `MCPTool` once per tool in each agent-loop worker, from the entries of <run>/tools.yaml that
trainctl.backends.tools wrote from the plan's checked servers and listings (trainctl.mcp). The first call connects;
every call has a timeout; a call that fails, times out or finds the server gone or unusable returns an error text to
the model (the trajectory goes on) and never raises out of `execute`. Nothing here validates a config: what can be
wrong with a server entry was reported at plan time (trainctl.checks.tools), and whatever changed since (an
mcpServers file edited or removed, a variable missing from a worker's environment) is the call's error result.

A server that dies mid-run (a stdio process killed, an SSE / HTTP server stopped): the calls in flight get an
error result at once, and the next call starts it again (stdio) or reconnects (network). A server that cannot be
started or reached again is tried once more after a pause that doubles from RETRY_FIRST_S up to RETRY_MAX_S; calls
in between get an error result at once, so a run never waits on a dead server. The call that brings a server back
is marked in the call log (`server_restart`), which the tool metrics count (tool/server_restarts).

Why a thread with its own event loop: an MCP connection is a set of anyio tasks owned by the task that opened it
(trainctl.mcp.connection), and tools are called from loops that may end (`asyncio.run` in a command) and from
threads without one. One long-lived loop per process owns those connections; callers on any loop or thread submit
coroutines to it. verl's agent-loop worker calls its tools from the loop that runs every trajectory; when a step's
trajectories end their turns together, that loop is busy for a few hundred milliseconds with their tokenizing and
requests. A call's messages (the SDK's writer, reader and session tasks: four hops through a loop's queue) then
wait on the bridge's own loop, not behind that work: only the answer's hand-back does (tool call median in a 4-step
agent run with 2 agent-loop workers: 30-65 ms through the bridge thread in 8 runs, 55-76 ms on the worker's loop in 2;
benchmarks/bench_agents.py). stdio servers started here stop when the process exits (atexit; stdin closes on a
kill).

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
from dataclasses import dataclass
from typing import Any

from trainctl.errors import ConfigProblems, TrainctlError
from trainctl.mcp.connection import (
    CLOSE_TIMEOUT,
    DEFAULT_CALL_TIMEOUT,
    DEFAULT_CONNECT_TIMEOUT,
    Connection,
    call_failure,
    explain,
)
from trainctl.mcp.results import error_text, result_text
from trainctl.mcp.specs import ServerSpec, apply_override, load_servers
from trainctl.runtime.lazy import lazy_classes
from trainctl.runtime.tool_calls import CallLog

# pauses before trying a server again that could not be started or reached after it went away
RETRY_FIRST_S = 1.0
RETRY_MAX_S = 30.0


class ToolCallError(Exception):
    """A call that did not produce a result (timeout, connection lost, server unusable): its text goes to the model."""


@dataclass
class CallOutcome:
    """One call through the bridge: the text the model reads, whether it is an error, and whether this call
    brought its server back (started a stdio server again, or reconnected, after it went away)."""

    text: str
    is_error: bool
    server_restart: bool = False
    seconds: float = 0.0
    # of `seconds`, the request to the server and its answer over the open connection (the rest: waiting for the
    # connection, the hops between the caller's loop and the bridge's)
    server_seconds: float | None = None
    # those hops: from the call to its start on the bridge's loop, and from the answer to the caller running again
    # (both near 0 when the caller's loop is the bridge's; with a bridge thread, waits for the GIL and a busy loop)
    hop_in_seconds: float | None = None
    hop_out_seconds: float | None = None


@dataclass
class _Down:
    """A server that could not be started or reached again: when to try next, and why."""

    until: float
    pause: float
    reason: str


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
        self._lost: set = set()  # keys whose connection went away: opening them again is a restart
        self._down: dict[Any, _Down] = {}  # keys that could not be brought back, until their next try
        self.restarts: dict[str, int] = {}  # server name -> times it was started again or reconnected
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
        """Run a coroutine on the bridge loop from async code on any loop (on the bridge's own: directly)."""
        if asyncio.get_running_loop() is self.loop:
            return await coro
        return await asyncio.wrap_future(self.submit(coro))

    # --- on the bridge loop ---
    async def connection(self, key: Any, spec: ServerSpec, timeout: float) -> Connection:
        """The open connection for `key`, opening it (starting a stdio server) when there is none. A connection
        that broke is replaced (the server is started again or reconnected); a server that could not be brought
        back is tried again only after its pause (RETRY_FIRST_S, doubling), until then this raises at once."""
        conn = self._connections.get(key)
        if conn is not None and conn.alive:
            return conn
        if conn is not None:  # broken (the server exited, the stream dropped): start over
            self._connections.pop(key, None)
            self._lost.add(key)
            await conn.close()
        if key in self._opening:
            return await asyncio.shield(self._opening[key])
        down = self._down.get(key)
        if down is not None and time.monotonic() < down.until:
            raise ToolCallError(
                f"MCP server {spec.name!r} is unavailable ({down.reason}); the next try to "
                f"{'start' if spec.transport == 'stdio' else 'reach'} it is in {down.until - time.monotonic():.1f} s"
            )
        opening = self.loop.create_future()
        self._opening[key] = opening
        try:
            conn = Connection(spec)
            try:
                await conn.open(timeout)
            except BaseException as e:
                if key in self._lost and not isinstance(e, asyncio.CancelledError):
                    pause = min(RETRY_MAX_S, down.pause * 2) if down is not None else RETRY_FIRST_S
                    self._down[key] = _Down(time.monotonic() + pause, pause, explain(e, spec))
                raise
            self._down.pop(key, None)
            if key in self._lost:  # back after it went away: the first call through it reports the restart
                self._lost.discard(key)
                self.restarts[spec.name] = self.restarts.get(spec.name, 0) + 1
                conn.restart_unreported = True
            self._connections[key] = conn
            opening.set_result(conn)
            return conn
        except BaseException as e:
            opening.set_exception(e)
            opening.exception()  # retrieved: no "never retrieved" warning when nobody else waited
            raise
        finally:
            self._opening.pop(key, None)

    async def lost(self, key: Any) -> None:
        """The connection for `key` went away during a call: close it; the next call brings the server back."""
        self._lost.add(key)
        await self.close_key(key)

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


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


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
    outcome = await call(spec, tool, arguments, timeout=timeout, connect_timeout=connect_timeout, key=key)
    return outcome.text, outcome.is_error


async def call(
    spec: ServerSpec,
    tool: str,
    arguments: dict,
    *,
    timeout: float = DEFAULT_CALL_TIMEOUT,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    key: Any = None,
) -> CallOutcome:
    """call_tool, with whether this call brought its server back and how long the call itself took (the server's
    start or connection not counted). Raises ToolCallError as call_tool does."""
    b = bridge()
    key = key if key is not None else ("shared", spec)
    called = time.perf_counter()

    async def on_bridge() -> CallOutcome:
        hop_in = time.perf_counter() - called
        try:
            conn = await b.connection(key, spec, connect_timeout)
        except ToolCallError:
            raise
        except BaseException as e:
            if isinstance(e, asyncio.CancelledError):
                raise
            raise ToolCallError(f"MCP server {spec.name!r} is unavailable: {explain(e, spec)}") from None
        restarted, conn.restart_unreported = conn.restart_unreported, False
        start = time.perf_counter()
        try:
            result = await conn.call(tool, arguments, timeout)
        except BaseException as e:
            if isinstance(e, asyncio.CancelledError):
                raise
            reason, went_away = call_failure(e, spec, tool, timeout, conn.alive)
            if went_away:
                await b.lost(key)  # the next call starts the server again (stdio) or reconnects
            raise ToolCallError(reason) from None
        text, is_error = result_text(result)
        answered = time.perf_counter()
        return CallOutcome(text, is_error, restarted, answered - start, answered - start, hop_in, answered)

    # the outer bound covers a bridge that cannot even start the call (a wedged connection)
    try:
        outcome = await asyncio.wait_for(b.acall(on_bridge()), timeout + connect_timeout + 5)
    except TimeoutError:
        raise ToolCallError(f"the call to {tool!r} timed out after {timeout:g} s") from None
    # on_bridge left the time of the answer there (one clock: perf_counter is process-wide)
    outcome.hop_out_seconds = time.perf_counter() - outcome.hop_out_seconds
    return outcome


async def model_answer(
    spec: ServerSpec,
    tool: str,
    arguments: Any,
    *,
    timeout: float = DEFAULT_CALL_TIMEOUT,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    key: Any = None,
) -> CallOutcome:
    """What the model reads for one call, as MCPTool answers verl: the server's text, an error text for an error
    result or for no result at all (never raises, but for cancellation). `seconds` is the whole call as the caller
    waited for it."""
    start = time.perf_counter()
    restarted, server_seconds, hops = False, None, (None, None)
    try:
        if not isinstance(arguments, dict):
            raise ToolCallError(f"arguments must be a JSON object, not {type(arguments).__name__}")
        outcome = await call(
            spec,
            tool,
            arguments,
            timeout=timeout,
            connect_timeout=connect_timeout,
            key=key,
        )
        text, error, restarted = outcome.text, outcome.is_error, outcome.server_restart
        server_seconds = outcome.server_seconds
        hops = outcome.hop_in_seconds, outcome.hop_out_seconds
        if error:
            text = error_text(text)
    except asyncio.CancelledError:
        raise
    except ToolCallError as e:
        text, error = error_text(str(e)), True
    except Exception as e:  # anything else is a bug here or in the SDK: the model still gets an answer
        text, error = error_text(f"the call to {tool!r} failed: {type(e).__name__}: {e}"), True
    return CallOutcome(text, bool(error), restarted, time.perf_counter() - start, server_seconds, *hops)


@functools.cache
def _servers_from_file(path: str) -> dict[str, ServerSpec]:
    return load_servers(path)


def worker_spec(config: dict) -> ServerSpec:
    """The server a tools.yaml entry names: the checked entry itself (`server_spec`), or the server of that name in
    the user's mcpServers file (`servers_file`: its env and headers stay there), with the keys tools.servers.NAME
    changed (`server_overrides`). The plan checked both; a file that
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
    try:  # the keys tools.servers.NAME changed, applied to the file's entry again
        return apply_override(servers[name], dict(config.get("server_overrides") or {}), path)
    except TrainctlError as e:
        raise ToolCallError(f"MCP server {name!r} is unavailable: {e.message}") from None


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
            self._warm()

        def _warm(self) -> None:
            """Start connecting now, on the bridge's loop: verl builds its tools when an agent-loop worker starts,
            long before the first rollout, so no trajectory waits for a stdio server's start-up (~1.7 s on 2 cores:
            the first step's calls all waited for it). A server that fails to start fails the first call instead.
            Only where an event loop runs: the worker builds its tools on its loop, while verl's trainer builds them
            outside any loop only to read their schemas, and a server started there would never be called."""
            if self.session != "shared" or not _loop_running():
                return
            try:
                spec = self.spec()
            except ToolCallError:
                return  # the first call says why
            b = bridge()
            key = ("shared", spec)
            if key in b.open_keys():
                return
            future = b.submit(b.connection(key, spec, self.connect_timeout))
            future.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved: the call reports it

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
            try:
                spec = self.spec()
            except ToolCallError as e:
                outcome = CallOutcome(error_text(str(e)), True)
            else:
                outcome = await model_answer(
                    spec,
                    self.mcp_tool,
                    parameters,
                    timeout=self.timeout,
                    connect_timeout=self.connect_timeout,
                    key=self._key(spec, instance_id, agent_data),
                )
            if self.log is not None:
                record = {
                    "time": time.time(),
                    "trajectory": getattr(agent_data, "request_id", None),
                    "server": self.server_name,
                    "tool": self.name,
                    "arguments": parameters,
                    "result": outcome.text,
                    "error": outcome.is_error,
                    "seconds": round(outcome.seconds, 6),
                }
                if outcome.server_seconds is not None:
                    record["server_seconds"] = round(outcome.server_seconds, 6)
                    record["hop_in_seconds"] = round(outcome.hop_in_seconds, 6)
                    record["hop_out_seconds"] = round(outcome.hop_out_seconds, 6)
                if outcome.server_restart:
                    record["server_restart"] = True
                self.log.write(record)
            metrics = {
                "mcp_server": self.server_name,
                "tool_seconds": outcome.seconds,
                "tool_error": int(outcome.is_error),
            }
            return ToolResponse(text=outcome.text), 0.0, metrics

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
