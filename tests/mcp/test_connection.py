"""One MCP client session against a real stdio server, and the one-line reasons a server could not be used."""

from __future__ import annotations

import asyncio
import sys
import uuid

import pytest

from tests.runtime.mcp_fixtures import calculator_entry, probe_server_entry, wait_gone
from trainctl.errors import TrainctlError
from trainctl.mcp.connection import Connection, explain
from trainctl.mcp.results import result_text
from trainctl.mcp.specs import ServerSpec, UnsetVariable, parse_server


def test_a_connection_lists_calls_and_closes(tmp_path):
    log = tmp_path / "calc.log"
    spec = parse_server("calc", calculator_entry(log=log))

    async def session():
        conn = Connection(spec)
        await conn.open(60)
        try:
            assert conn.alive
            names = [t.name for t in await conn.list_tools(30)]
            answer = result_text(await conn.call("calculator", {"expression": "6 * 7"}, 30))
        finally:
            await conn.close()
        return names, answer, conn.alive

    names, answer, alive = asyncio.run(session())
    assert names == ["calculator"] and answer == ("42", False) and alive is False
    assert not wait_gone(str(log)), "closing the connection stops the stdio server"


def test_a_server_that_never_answers_times_out_while_connecting(tmp_path):
    tag = uuid.uuid4().hex
    spec = parse_server("mute", {"command": sys.executable, "args": ["-c", "import time; time.sleep(60)", tag]})

    async def session():
        conn = Connection(spec)
        with pytest.raises(TimeoutError) as e:
            await conn.open(1)
        return str(e.value)

    assert asyncio.run(session()) == "it did not finish connecting within 1 s"
    assert not wait_gone(tag), "the server that never answered is stopped"


def test_why_a_server_could_not_be_used():
    stdio = parse_server("s", probe_server_entry())
    url = ServerSpec("u", "sse", url="http://user:pw@127.0.0.1:1/sse")
    group = BaseExceptionGroup("tasks", [asyncio.CancelledError(), FileNotFoundError("python3.99")])
    assert explain(group, stdio) == f"the command {sys.executable!r} was not found"
    assert explain(PermissionError(), stdio) == f"the command {sys.executable!r} cannot be executed (permission denied)"
    assert explain(ConnectionRefusedError("refused"), url) == "nothing answers at http://127.0.0.1:1/sse (refused)"
    assert explain(UnsetVariable("env K", "V")) == "env K refers to ${V}, which is not set in the environment"
    assert explain(TrainctlError("a message")) == "a message"
    assert explain(TimeoutError()) == "it did not answer in time"
    assert explain(ValueError("odd")) == "ValueError: odd"
