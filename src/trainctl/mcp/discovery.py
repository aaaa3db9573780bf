"""Discovery (plan time): connect to each server once, list its tools, disconnect; report what cannot be reached.

A stdio server is started and stopped again; a server that does not start shows its command and the last lines it
wrote on stderr (secret values scrubbed), one that cannot be reached its URL.
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from trainctl.errors import ConfigProblems, Problem
from trainctl.mcp.connection import DEFAULT_CONNECT_TIMEOUT, Connection, explain, scrub
from trainctl.mcp.specs import ServerSpec, strip_userinfo

T = TypeVar("T")


@dataclass
class Discovered:
    server: ServerSpec
    tools: list  # mcp.types.Tool
    seconds: float


def run_on_fresh_loop(make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to its end on a new event loop in a thread of its own, and return its result: the same from
    plain code and from inside a running loop (a notebook, an async caller). Its connections close with it."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = asyncio.run(make())
        except BaseException as e:  # handed to the caller's thread
            out["error"] = e

    thread = threading.Thread(target=run, name="trainctl-mcp-discovery", daemon=True)
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


async def _discover_one(spec: ServerSpec, timeout: float) -> Discovered:
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as err:
        conn = Connection(spec, stderr=err)
        try:
            await conn.open(timeout)
            tools = await conn.list_tools(timeout)
        except BaseException as e:
            reason = explain(e, spec)
            err.flush()
            err.seek(0)
            tail = [line.rstrip() for line in err.read().splitlines() if line.strip()][-5:]
            raise _Unreachable(spec, reason, [scrub(t, spec.secret_values()) for t in tail]) from None
        finally:
            await conn.close()
    return Discovered(spec, tools, time.perf_counter() - start)


class _Unreachable(Exception):
    def __init__(self, spec: ServerSpec, reason: str, stderr_tail: list[str]):
        super().__init__(reason)
        self.spec, self.reason, self.stderr_tail = spec, reason, stderr_tail


# listings of stdio servers per spec (command, args, env, cwd), for `cached=True`: the plans of a sweep start each
# server once. A run starts its own server from the same command; a URL is asked every time (the check is that it
# answers now), and a failure is never cached.
_LISTINGS: dict[ServerSpec, Discovered] = {}
_LISTINGS_LOCK = threading.Lock()


def discover(
    servers: dict[str, ServerSpec], timeout: float = DEFAULT_CONNECT_TIMEOUT, cached: bool = False
) -> dict[str, Discovered]:
    """Connect to every server at once, list its tools and disconnect (stdio servers are stopped again). With
    `cached`, a stdio server listed before in this process is not started again.

    Raises ConfigProblems naming each server that could not be started or reached, with the reason."""
    with _LISTINGS_LOCK:
        known = {n: _LISTINGS[s] for n, s in servers.items() if cached and s in _LISTINGS}
        todo = {n: s for n, s in servers.items() if n not in known}
        found = _discover_all(todo, timeout) if todo else {}
        for name, d in found.items():
            if todo[name].transport == "stdio":
                _LISTINGS[todo[name]] = d
        return {n: known.get(n) or found[n] for n in servers}


def forget_discovered() -> None:
    """Drop the cached listings (tests; a server whose tools changed)."""
    with _LISTINGS_LOCK:
        _LISTINGS.clear()


def _discover_all(servers: dict[str, ServerSpec], timeout: float) -> dict[str, Discovered]:
    async def all_servers():
        return await asyncio.gather(*(_discover_one(s, timeout) for s in servers.values()), return_exceptions=True)

    results = run_on_fresh_loop(all_servers)
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
    return f"start the server first, or fix its url (check: curl -sN {strip_userinfo(spec.url or '')})"
