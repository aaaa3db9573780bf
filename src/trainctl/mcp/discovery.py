"""Discovery (plan time, the CLI): connect to each server once, list its tools, disconnect; report what cannot be
reached. `probe` also makes calls while a server is open (`trainctl tools call`, the tokenization preflight).

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

from trainctl.errors import ConfigProblems, Problem, TrainctlError
from trainctl.mcp.connection import (
    DEFAULT_CALL_TIMEOUT,
    DEFAULT_CONNECT_TIMEOUT,
    Connection,
    call_failure,
    explain,
    scrub,
)
from trainctl.mcp.results import error_text, result_text
from trainctl.mcp.specs import ServerSpec, strip_userinfo

T = TypeVar("T")


@dataclass
class Discovered:
    server: ServerSpec
    tools: list  # mcp.types.Tool
    seconds: float
    # what the server said of itself in MCP's initialize: {"name": ..., "version": ...} (None: it said nothing)
    server_info: dict | None = None


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


# calls made while a server is open for discovery: (tool, arguments) pairs chosen from its listing
Choose = Callable[[list], list[tuple[str, Any]]]


@dataclass
class Answer:
    """One call made at plan time or from the CLI: the text the model would read (error texts start with
    `Error:`), whether the server flagged it as an error, whether any result came back, and how long it took."""

    tool: str
    arguments: Any
    text: str
    is_error: bool
    answered: bool
    seconds: float


async def _discover_one(
    spec: ServerSpec, timeout: float, choose: Choose | None = None, call_timeout: float | None = None
) -> Discovered | tuple[Discovered, list[Answer]]:
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as err:
        conn = Connection(spec, stderr=err)
        try:
            try:
                await conn.open(timeout)
                tools = await conn.list_tools(timeout)
                info = conn.server_info()
            except BaseException as e:
                reason = explain(e, spec)
                err.flush()
                err.seek(0)
                tail = [line.rstrip() for line in err.read().splitlines() if line.strip()][-5:]
                raise _Unreachable(spec, reason, [scrub(t, spec.secret_values()) for t in tail]) from None
            found = Discovered(spec, tools, time.perf_counter() - start, info)
            if choose is None:
                return found
            answers = []
            for tool, arguments in choose(tools):
                answers.append(await _answer(conn, spec, tool, arguments, call_timeout or DEFAULT_CALL_TIMEOUT))
            return found, answers
        finally:
            await conn.close()


async def _answer(conn: Connection, spec: ServerSpec, tool: str, arguments: Any, timeout: float) -> Answer:
    start = time.perf_counter()
    if not isinstance(arguments, dict):
        text = error_text(f"arguments must be a JSON object, not {type(arguments).__name__}")
        return Answer(tool, arguments, text, True, False, 0.0)
    try:
        result = await conn.call(tool, arguments, timeout)
    except Exception as e:
        reason, _ = call_failure(e, spec, tool, timeout, conn.alive)
        return Answer(tool, arguments, error_text(reason), True, False, time.perf_counter() - start)
    text, is_error = result_text(result)
    return Answer(tool, arguments, error_text(text) if is_error else text, is_error, True, time.perf_counter() - start)


def probe(
    spec: ServerSpec, choose: Choose, timeout: float = DEFAULT_CONNECT_TIMEOUT, call_timeout: float | None = None
) -> tuple[Discovered, list[Answer]]:
    """Start (stdio) or reach one server, list its tools, make the calls `choose(tools)` returns, one after the
    other, and stop it again. `choose` may raise (a tool the server does not list). Raises ConfigProblems when the
    server cannot be started or reached, as `discover` does."""
    results = run_on_fresh_loop(lambda: _gather({spec.name: spec}, timeout, choose, call_timeout))
    found, problems = _sorted_out({spec.name: spec}, results)
    if problems:
        raise ConfigProblems(problems)
    return found[spec.name]


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


def discover_each(
    servers: dict[str, ServerSpec], timeout: float = DEFAULT_CONNECT_TIMEOUT
) -> tuple[dict[str, Discovered], list[Problem]]:
    """Connect to every server at once and list its tools: what each listed, and a Problem for each server that
    could not be started or reached (nothing cached)."""
    return _sorted_out(servers, run_on_fresh_loop(lambda: _gather(servers, timeout)))


def _discover_all(servers: dict[str, ServerSpec], timeout: float) -> dict[str, Discovered]:
    found, problems = discover_each(servers, timeout)
    if problems:
        raise ConfigProblems(problems)
    return found


async def _gather(servers: dict[str, ServerSpec], timeout: float, choose=None, call_timeout=None) -> list:
    return await asyncio.gather(
        *(_discover_one(s, timeout, choose, call_timeout) for s in servers.values()), return_exceptions=True
    )


def _sorted_out(servers: dict[str, ServerSpec], results: list) -> tuple[dict, list[Problem]]:
    found, problems = {}, []
    for spec, result in zip(servers.values(), results, strict=True):
        if isinstance(result, _Unreachable):
            problems.append(unreachable_problem(spec, result.reason, result.stderr_tail))
        elif isinstance(result, TrainctlError):
            raise result  # `choose` refused (a tool the server does not list)
        elif isinstance(result, BaseException):
            problems.append(
                Problem(f"MCP server {spec.name!r}: {explain(result, spec)}", key=f"mcpServers.{spec.name}")
            )
        else:
            found[spec.name] = result
    return found, problems


def unreachable_problem(spec: ServerSpec, reason: str, stderr_tail: list[str]) -> Problem:
    """Why a server could not be started or reached: its command or URL, its last stderr lines, how to check."""
    details = [f"{spec.describe()}"]
    if stderr_tail:
        details.append("its last lines on stderr:")
        details.extend(f"  {line}" for line in stderr_tail)
    return Problem(
        f"MCP server {spec.name!r} could not be {'started' if spec.transport == 'stdio' else 'reached'}: {reason}",
        key=f"mcpServers.{spec.name}",
        details=details,
        hint=_unreachable_hint(spec),
    )


def _unreachable_hint(spec: ServerSpec) -> str:
    if spec.transport == "stdio":
        return f"run it by hand to see it start: {spec.command_line()}"
    return f"start the server first, or fix its url (check: curl -sN {strip_userinfo(spec.url or '')})"
