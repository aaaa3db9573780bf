"""MCP server entries at plan time: the mcpServers file, tools.servers, and what would keep a server from starting
here (nothing is started: every test runs with `no_processes`)."""

from __future__ import annotations

import json

import pytest

from trainctl.config.load import load
from trainctl.errors import ConfigProblems, TrainctlError
from trainctl.mcp.specs import (
    ServerSpec,
    UnsetVariable,
    allowed_tools,
    expand,
    is_reference,
    load_servers,
    parse_server,
    parse_servers,
    server_specs,
    spec_problems,
)

SECRET = "s3cr3t-value-0123456789"


# --- the mcpServers file -------------------------------------------------------------------------------------


def test_servers_file_shapes_and_mistakes(tmp_path, no_processes):
    good = tmp_path / "mcp.json"
    good.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "local": {"command": "node", "args": ["build/index.js"], "env": {"API_KEY": "${API_KEY}"}},
                    "calc": {"type": "sse", "url": "http://localhost:8001/sse"},
                    "remote": {"url": "http://127.0.0.1:9000/mcp"},
                    "vscode": {"type": "http", "url": "http://127.0.0.1:9001/mcp"},
                }
            }
        )
    )
    servers = load_servers(good)
    assert {n: s.transport for n, s in servers.items()} == {
        "local": "stdio",
        "calc": "sse",
        "remote": "streamable-http",
        "vscode": "streamable-http",
    }
    assert servers["local"].describe() == "stdio: node build/index.js"
    assert "API_KEY" not in repr(servers["local"]) and "${API_KEY}" not in servers["local"].describe()
    flags = parse_server("x", {"command": "srv", "args": ["--api-key", SECRET, f"--token={SECRET}", "--port", "3"]})
    assert flags.describe() == "stdio: srv --api-key *** --token=*** --port 3"

    broken = tmp_path / "broken.json"
    broken.write_text('{\n  "mcpServers": {\n    "calc": {"url": "http://x/sse",}\n  }\n}\n')
    with pytest.raises(TrainctlError) as e:
        load_servers(broken)
    assert f"MCP servers file {broken} is not valid JSON" in e.value.message and "at line 3" in e.value.message
    assert '{"url": "http://x/sse",}' in "\n".join(e.value.details)

    with pytest.raises(TrainctlError, match='expected an object with an "mcpServers" object inside'):
        parse_servers({"servers": {}}, "x.json")
    with pytest.raises(ConfigProblems) as problems:
        parse_servers(
            {"mcpServers": {"a": {"args": ["x"]}, "b": {"type": "websocket", "url": "http://h/ws"}, "c": "npx"}}, "f"
        )
    messages = [p.message for p in problems.value.problems]
    assert messages == [
        'f: server \'a\' has neither a "command" (stdio) nor an http(s) "url" (sse / streamable-http).',
        "f: server 'b': unknown \"type\" 'websocket'.",
        "f: server 'c' must be an object, not str.",
    ]
    with pytest.raises(TrainctlError, match=r"MCP servers file .* does not exist"):
        load_servers(tmp_path / "missing.json")


# --- a checked entry, handed to a worker ---------------------------------------------------------------------


def test_a_checked_entry_comes_back_from_its_json_unchanged(no_processes):
    entries = {
        "local": {"command": "node", "args": ["index.js", "--port", "3"], "env": {"K": "${K}"}, "cwd": "/srv"},
        "calc": {"type": "sse", "url": "http://127.0.0.1:8001/sse", "headers": {"Authorization": "${AUTH}"}},
        "remote": {"type": "http", "url": "http://127.0.0.1:9000/mcp"},
    }
    for name, spec in parse_servers({"mcpServers": entries}).items():
        assert ServerSpec.from_json(name, json.loads(json.dumps(spec.to_json()))) == spec


# --- what depends on this machine ----------------------------------------------------------------------------


def test_unset_variables_and_missing_folders_are_named_without_values(tmp_path, monkeypatch, no_processes):
    monkeypatch.setenv("SET_TOKEN", SECRET)
    monkeypatch.delenv("TRAINCTL_TEST_UNSET", raising=False)
    servers = parse_servers(
        {
            "mcpServers": {
                "fine": {"command": "srv", "env": {"TOKEN": "${SET_TOKEN}", "MODE": "fast"}, "cwd": str(tmp_path)},
                "stdio": {"command": "srv", "env": {"TOKEN": "Bearer ${TRAINCTL_TEST_UNSET}"}, "cwd": "/no/such"},
                "http": {"url": "http://h/mcp", "headers": {"Authorization": "${TRAINCTL_TEST_UNSET}"}},
            }
        }
    )
    assert spec_problems(servers["fine"]) == []
    found = [(p.field, p.message) for p in spec_problems(servers["stdio"])]
    assert found == [
        ("env.TOKEN", "env.TOKEN refers to ${TRAINCTL_TEST_UNSET}, which is not set in this environment"),
        ("cwd", "cwd '/no/such' is not a folder"),
    ]
    (header,) = spec_problems(servers["http"])
    assert header.field == "headers.Authorization" and "export TRAINCTL_TEST_UNSET=..." in header.hint

    assert servers["fine"].expanded_env() == {"TOKEN": SECRET, "MODE": "fast"}
    with pytest.raises(UnsetVariable) as e:
        servers["stdio"].expanded_env()
    assert str(e.value) == "env TOKEN refers to ${TRAINCTL_TEST_UNSET}, which is not set in the environment"
    assert not isinstance(e.value, TrainctlError), "a worker meets this as a call failure, not a config error"
    assert expand("a ${SET_TOKEN} b", "x") == f"a {SECRET} b"
    assert servers["fine"].secret_values() == [SECRET, "fast"]
    assert is_reference("${A}${B}") and is_reference(" ${A} ") and not is_reference("Bearer ${A}")


# --- tools.servers and tools.servers_file --------------------------------------------------------------------


def test_the_tools_sections_servers(tmp_path, no_processes):
    servers_file = tmp_path / "mcp.json"
    servers_file.write_text(json.dumps({"mcpServers": {"remote": {"type": "http", "url": "http://127.0.0.1:9/mcp"}}}))
    tools = load(
        [
            "tools=calculator",
            "tools.servers.calculator.env=[CALC_TOKEN]",
            "+tools.servers.search.transport=sse",
            "+tools.servers.search.url=http://127.0.0.1:8001/sse",
            f"tools.servers_file={servers_file}",
        ]
    ).cfg.tools
    inline, from_file = server_specs(tools)
    calc = inline["calculator"]
    assert calc.transport == "stdio" and calc.command == tools.servers["calculator"].command
    assert calc.env == (("CALC_TOKEN", "${CALC_TOKEN}"),), "env names become references, never values"
    assert inline["search"] == ServerSpec("search", "sse", url="http://127.0.0.1:8001/sse")
    assert from_file == {"remote": ServerSpec("remote", "streamable-http", url="http://127.0.0.1:9/mcp")}
    assert allowed_tools(tools, "calculator") == ["calculator"]
    assert allowed_tools(tools, "search") is None and allowed_tools(tools, "remote") is None
