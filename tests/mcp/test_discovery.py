"""Discovery (plan time) against real MCP server processes: each server started or reached once, its tools listed,
and what cannot be started or reached named with the reason."""

from __future__ import annotations

import asyncio
import sys

import pytest

from tests.runtime.mcp_fixtures import (
    calculator_entry,
    calculator_file,
    free_port,
    http_server,
    probe_server_entry,
    wait_gone,
)
from trainctl.backends.tools import tool_config, write_tool_config
from trainctl.errors import ConfigProblems
from trainctl.mcp.discovery import discover, forget_discovered
from trainctl.mcp.specs import ServerSpec, parse_servers

SECRET = "s3cr3t-value-0123456789"


def _servers(**entries) -> dict[str, ServerSpec]:
    return parse_servers({"mcpServers": entries})


def test_discovery_lists_the_tools_verl_then_loads(tmp_path):
    from verl.tools.tool_registry import initialize_tools_from_config

    from trainctl.data.tools import calculator_schema

    servers = _servers(calc=calculator_entry(log=tmp_path / "calc.log"))
    found = discover(servers)
    assert [t.name for t in found["calc"].tools] == ["calculator"]
    assert not wait_gone(str(tmp_path / "calc.log")), "discovery stops the stdio server it started"

    path = write_tool_config(tmp_path / "tools.yaml", tool_config(found, timeout=5))
    [tool] = initialize_tools_from_config(str(path))
    assert type(tool).__name__ == "MCPTool" and tool.name == "calculator"
    # the prompt verl renders for this tool is exactly the one the SFT demonstrations carry
    assert tool.tool_schema.model_dump(exclude_unset=True, exclude_none=True) == calculator_schema()
    assert tool.config["server_spec"] == servers["calc"].to_json()


def test_discovery_names_each_server_that_cannot_start_or_be_reached(tmp_path, monkeypatch):
    monkeypatch.setenv("API_TOKEN", SECRET)
    port = free_port()  # nothing listens there
    servers = _servers(
        ghost={"command": "trainctl-no-such-mcp-server", "args": ["--stdio"]},
        down={"type": "sse", "url": f"http://127.0.0.1:{port}/sse"},
        down_http={"url": f"http://127.0.0.1:{port}/mcp"},
        refuses=probe_server_entry("--fail-start", env={"API_TOKEN": "${API_TOKEN}"}),
        unset={"command": sys.executable, "args": ["-c", "pass"], "env": {"KEY": "${TRAINCTL_TEST_UNSET_VAR}"}},
        fine=calculator_entry(),
    )
    with pytest.raises(ConfigProblems) as e:
        discover(servers, timeout=30)
    by_key = {p.key: p for p in e.value.problems}
    assert sorted(by_key) == [f"mcpServers.{n}" for n in ("down", "down_http", "ghost", "refuses", "unset")]
    ghost = by_key["mcpServers.ghost"]
    assert (
        ghost.message
        == "MCP server 'ghost' could not be started: the command 'trainctl-no-such-mcp-server' was not found"
    )
    assert ghost.hint == "run it by hand to see it start: trainctl-no-such-mcp-server --stdio"
    assert by_key["mcpServers.down"].message.startswith(
        f"MCP server 'down' could not be reached: nothing answers at http://127.0.0.1:{port}/sse"
    )
    assert by_key["mcpServers.down_http"].message.startswith(
        f"MCP server 'down_http' could not be reached: nothing answers at http://127.0.0.1:{port}/mcp"
    )
    refuses = by_key["mcpServers.refuses"]
    assert "could not be started: the server closed the connection" in refuses.message
    assert "  testing server: cannot start, API_TOKEN=*** rejected" in refuses.details
    assert by_key["mcpServers.unset"].message == (
        "MCP server 'unset' could not be started: env KEY refers to ${TRAINCTL_TEST_UNSET_VAR}, "
        "which is not set in the environment"
    )
    assert SECRET not in str(e.value) + "".join(str(p.details) for p in e.value.problems)


def test_a_stdio_listing_is_reused_when_asked_and_a_url_is_asked_every_time(tmp_path):
    forget_discovered()
    log = tmp_path / "calc.log"
    stdio = _servers(calc=calculator_entry(log=log))
    first = discover(stdio, cached=True)
    again = discover(stdio, cached=True)
    assert again["calc"] is first["calc"], "a sweep's plans start each stdio server once"
    forget_discovered()
    assert discover(stdio, cached=True)["calc"] is not first["calc"]

    port = free_port()
    url = _servers(calc={"type": "sse", "url": f"http://127.0.0.1:{port}/sse"})
    argv = [sys.executable, str(calculator_file()), "--transport", "sse", "--port", str(port)]
    with http_server(argv, port):
        assert [t.name for t in discover(url, cached=True)["calc"].tools] == ["calculator"]
    with pytest.raises(ConfigProblems, match="1 problem"):
        discover(url, timeout=5, cached=True)  # nothing listens any more: asked again, not served from a cache
    forget_discovered()


def test_discovery_from_inside_a_running_event_loop(tmp_path):
    """A caller on an event loop (a notebook, an async program) gets the same listing: discovery runs its own."""
    marker = str(tmp_path / "calc.log")

    async def caller():
        return discover(_servers(calc=calculator_entry(log=tmp_path / "calc.log")))

    found = asyncio.run(caller())
    assert [t.name for t in found["calc"].tools] == ["calculator"]
    assert not wait_gone(marker), "its stdio server stopped with it"
