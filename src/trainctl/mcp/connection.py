"""One MCP client session, through the official `mcp` SDK, and why a server could not be used.

An MCP connection is a set of anyio tasks (stdio pipes, an SSE stream) owned by the task that opened it: a
Connection enters and leaves the SDK's client inside one task of its own, on whatever event loop opened it, and
other tasks on that loop call through it. Plan-time discovery opens one per server on a short-lived loop
(trainctl.mcp.discovery); a worker keeps them on its bridge loop (trainctl.runtime.mcp_bridge).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from typing import Any

from trainctl.errors import TrainctlError
from trainctl.mcp.specs import ServerSpec, UnsetVariable, strip_userinfo

DEFAULT_CALL_TIMEOUT = 30.0
DEFAULT_CONNECT_TIMEOUT = 60.0
# how long closing a connection may take (the SDK gives a stdio server 2 s after stdin closes, then SIGTERM, SIGKILL)
CLOSE_TIMEOUT = 10.0


class Connection:
    """One live MCP client session. A task on the opening loop holds it open until close()."""

    def __init__(self, spec: ServerSpec, stderr: Any = None):
        self.spec = spec
        self.stderr = stderr
        self.client = None
        self.broken: str | None = None
        # set by the worker-side bridge on a connection that replaced one that went away, until a call reports it
        self.restart_unreported = False
        self._closing: asyncio.Event | None = None
        self._task: asyncio.Task | None = None

    def _client(self):
        from mcp import Client

        spec = self.spec
        if spec.transport == "stdio":
            from mcp.client.stdio import StdioServerParameters, stdio_client

            env = spec.expanded_env()
            params = StdioServerParameters(command=spec.command, args=list(spec.args), env=env or None, cwd=spec.cwd)
            return Client(stdio_client(params, errlog=self.stderr or stderr_stream()))
        headers = spec.expanded_headers() or None
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
            if ready.done() and not ready.cancelled():
                ready.exception()  # retrieved: the caller hears of the timeout instead
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
                if isinstance(e, asyncio.CancelledError):
                    ready.cancel()  # its loop is ending (asyncio.run's cleanup): nobody waits to be told why
                else:
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
        task = self._task
        if task is None or task.done():
            return
        if self.client is None:  # still connecting (a server that never answered): nothing to leave politely
            task.cancel()
        await asyncio.wait({task}, timeout=CLOSE_TIMEOUT)
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    @property
    def alive(self) -> bool:
        return self.client is not None and self.broken is None and self._task is not None and not self._task.done()

    def server_info(self) -> dict | None:
        """{"name", "version"} as the server gave them in MCP's initialize (None: not connected, or not given)."""
        info = getattr(self.client, "server_info", None) if self.client is not None else None
        if info is None:
            return None
        return {"name": getattr(info, "name", None), "version": getattr(info, "version", None)}

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
        """The server's CallToolResult (trainctl.mcp.results.result_text reads it); raises when none came back."""
        return await self.client.call_tool(tool, arguments, read_timeout_seconds=timeout)


def stderr_stream():
    """Where a stdio server's stderr goes: this process's stderr when it is a real file (Ray workers, the CLI)."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.fileno()
                return stream
        except (AttributeError, OSError, ValueError):
            continue
    return open(os.devnull, "w")


# -- why ------------------------------------------------------------------------------------------------------------

# JSON-RPC error codes the SDK raises with
CONNECTION_CLOSED = -32000  # a stdio server that exits before answering
REQUEST_TIMEOUT = -32001  # the SDK also told the server to cancel the request


def error_code(exc: BaseException) -> int | None:
    """The JSON-RPC error code of an McpError (None for anything else)."""
    return getattr(getattr(exc, "error", None), "code", None)


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
    if isinstance(leaf, UnsetVariable):
        return str(leaf)
    if isinstance(leaf, FileNotFoundError) and spec is not None and spec.transport == "stdio":
        return f"the command {spec.command!r} was not found"
    if isinstance(leaf, PermissionError) and spec is not None and spec.transport == "stdio":
        return f"the command {spec.command!r} cannot be executed (permission denied)"
    if isinstance(leaf, TimeoutError):
        return str(leaf) or "it did not answer in time"
    name = type(leaf).__name__
    text = str(leaf).strip()
    if "ConnectError" in name or isinstance(leaf, ConnectionError):
        return f"nothing answers at {strip_userinfo(spec.url or '') if spec else 'its URL'} ({text or name})"
    if "HTTPStatusError" in name:
        return f"the server answered with an HTTP error ({text.splitlines()[0] if text else name})"
    if error_code(leaf) == CONNECTION_CLOSED:
        return "the server closed the connection (it exited or crashed)"
    return f"{name}: {text}" if text else name


def call_failure(exc: BaseException, spec: ServerSpec, tool: str, timeout: float, alive: bool) -> tuple[str, bool]:
    """Why a call gave no result, in a sentence the model reads, and whether the server went away with it (the
    connection must then be opened again)."""
    code = error_code(exc)
    if code == REQUEST_TIMEOUT:  # the SDK also told the server to cancel it
        return f"the call to {tool!r} timed out after {timeout:g} s", False
    if not alive or code == CONNECTION_CLOSED:
        return f"MCP server {spec.name!r} went away during the call: {explain(exc, spec)}", True
    return f"the call to {tool!r} failed: {explain(exc, spec)}", False


def scrub(text: str, secrets: list[str]) -> str:
    """`text` with each of `secrets` replaced by ***."""
    for s in secrets:
        text = text.replace(s, "***")
    return text
