"""The MCP bridge against real MCP server processes: stdio ones it starts, SSE / streamable-HTTP ones on 127.0.0.1."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from tests.runtime.mcp_fixtures import (
    calculator_entry,
    calculator_file,
    free_port,
    http_server,
    probe_server_entry,
    processes_running,
    wait_gone,
)
from trainctl.errors import ConfigProblems, TrainctlError
from trainctl.runtime import mcp_bridge as mb

SECRET = "s3cr3t-value-0123456789"


def _servers(**entries) -> dict[str, mb.ServerSpec]:
    return mb.parse_servers({"mcpServers": entries})


def _tool(config: dict, schema: dict | None = None):
    from verl.tools.schemas import OpenAIFunctionToolSchema

    schema = schema or {"type": "function", "function": {"name": config["mcp_tool"], "description": "x"}}
    return mb.MCPTool(config=config, tool_schema=OpenAIFunctionToolSchema.model_validate(schema))


async def _execute(tool, arguments, agent_data=None):
    instance, _ = await tool.create(create_kwargs={})
    try:
        return await tool.execute(instance, arguments, agent_data=agent_data)
    finally:
        await tool.release(instance)


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
    servers = mb.load_servers(good)
    assert {n: s.transport for n, s in servers.items()} == {
        "local": "stdio",
        "calc": "sse",
        "remote": "streamable-http",
        "vscode": "streamable-http",
    }
    assert servers["local"].describe() == "stdio: node build/index.js"
    assert "API_KEY" not in repr(servers["local"]) and "${API_KEY}" not in servers["local"].describe()
    flags = mb.parse_server("x", {"command": "srv", "args": ["--api-key", SECRET, f"--token={SECRET}", "--port", "3"]})
    assert flags.describe() == "stdio: srv --api-key *** --token=*** --port 3"

    broken = tmp_path / "broken.json"
    broken.write_text('{\n  "mcpServers": {\n    "calc": {"url": "http://x/sse",}\n  }\n}\n')
    with pytest.raises(TrainctlError) as e:
        mb.load_servers(broken)
    assert f"MCP servers file {broken} is not valid JSON" in e.value.message and "at line 3" in e.value.message
    assert '{"url": "http://x/sse",}' in "\n".join(e.value.details)

    with pytest.raises(TrainctlError, match='expected an object with an "mcpServers" object inside'):
        mb.parse_servers({"servers": {}}, "x.json")
    with pytest.raises(ConfigProblems) as problems:
        mb.parse_servers(
            {"mcpServers": {"a": {"args": ["x"]}, "b": {"type": "websocket", "url": "http://h/ws"}, "c": "npx"}}, "f"
        )
    messages = [p.message for p in problems.value.problems]
    assert messages == [
        'f: server \'a\' has neither a "command" (stdio) nor an http(s) "url" (sse / streamable-http).',
        "f: server 'b': unknown \"type\" 'websocket'.",
        "f: server 'c' must be an object, not str.",
    ]
    with pytest.raises(TrainctlError, match=r"MCP servers file .* does not exist"):
        mb.load_servers(tmp_path / "missing.json")


# --- discovery -----------------------------------------------------------------------------------------------


def test_discovery_lists_the_tools_verl_then_loads(tmp_path):
    from verl.tools.tool_registry import initialize_tools_from_config

    from trainctl.data.tools import calculator_schema

    servers = _servers(calc=calculator_entry(log=tmp_path / "calc.log"))
    found = mb.discover(servers)
    assert [t.name for t in found["calc"].tools] == ["calculator"]
    assert not wait_gone(str(tmp_path / "calc.log")), "discovery stops the stdio server it started"

    path = mb.write_tool_config(tmp_path / "tools.yaml", mb.tool_config(found, timeout=5))
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
        mb.discover(servers, timeout=30)
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


def test_schemas_become_what_verl_validates():
    from verl.tools.schemas import OpenAIFunctionToolSchema

    tool = {
        "name": "search",
        "input_schema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "what to look for"},
                "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None, "title": "Limit"},
                "mode": {"enum": ["fast", "exact"]},
                "filters": {"type": "object", "properties": {"lang": {"type": "string"}}},
                "anything": {},
            },
            "required": ["query", "ghost"],
        },
    }
    schema = mb.openai_tool_schema(tool)
    OpenAIFunctionToolSchema.model_validate(schema)
    assert schema["function"]["description"] == "search"
    assert schema["function"]["parameters"]["properties"] == {
        "query": {"type": "string", "description": "what to look for"},
        "limit": {"type": ["integer", "null"], "description": "Limit"},
        "mode": {"type": "string", "enum": ["fast", "exact"]},
        "filters": {"type": "object"},
        "anything": {"type": "string"},
    }
    assert schema["function"]["parameters"]["required"] == ["query"]


# --- calls ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("transport,path", [("sse", "/sse"), ("streamable-http", "/mcp")])
def test_a_server_over_http_on_localhost(tmp_path, transport, path):
    port = free_port()
    log = tmp_path / "calc.log"
    argv = [sys.executable, str(calculator_file()), "--transport", transport, "--port", str(port), "--log", str(log)]
    with http_server(argv, port) as proc:
        servers = _servers(calc={"type": transport, "url": f"http://127.0.0.1:{port}{path}"})
        found = mb.discover(servers)
        [entry] = mb.tool_config(found)["tools"]
        tool = _tool(entry["config"], entry["tool_schema"])
        response, _, metrics = asyncio.run(_execute(tool, {"expression": "6 * (3 + 4)"}))
        assert response.text == "42" and metrics["tool_error"] == 0
        response, _, metrics = asyncio.run(_execute(tool, {"expression": "1 / 0"}))
        assert response.text == "Error: Error executing tool calculator: division by zero"
        assert metrics["tool_error"] == 1
        calls = [json.loads(line) for line in log.read_text().splitlines()]
        assert [(c["pid"], c["expression"]) for c in calls] == [(proc.pid, "6 * (3 + 4)"), (proc.pid, "1 / 0")]
    asyncio.run(mb.bridge().acall(mb.bridge().close_all()))


def test_a_call_that_raises_or_times_out_is_an_error_result_and_the_next_call_works(tmp_path):
    tag = uuid.uuid4().hex
    servers = _servers(testing=probe_server_entry("--tag", tag))
    found = mb.discover(servers)
    entries = {e["config"]["mcp_tool"]: e for e in mb.tool_config(found, timeout=3.0, call_log_dir=tmp_path)["tools"]}
    tools = {name: _tool(e["config"], e["tool_schema"]) for name, e in entries.items()}

    async def scenario():
        out = {}
        out["pid"] = await _execute(tools["pid"], {})
        start = time.perf_counter()
        out["slow"] = await _execute(tools["sleep"], {"seconds": 30})
        out["slow_seconds"] = time.perf_counter() - start
        out["after_timeout"] = await _execute(tools["sleep"], {"seconds": 0.01})
        out["raises"] = await _execute(tools["fail"], {"message": "boom"})
        out["bad_args"] = await _execute(tools["sleep"], {"seconds": "soon"})
        out["not_a_dict"] = await _execute(tools["sleep"], ["x"])
        out["crash"] = await _execute(tools["crash"], {})
        out["restarted"] = await _execute(tools["pid"], {})
        return out

    out = asyncio.run(scenario())
    first_pid = int(out["pid"][0].text)
    assert out["slow"][0].text == "Error: the call to 'sleep' timed out after 3 s"
    assert out["slow_seconds"] < 10
    assert out["after_timeout"][0].text == "slept 0.01 s", "a timeout does not break the connection"
    assert out["raises"][0].text.startswith("Error: Error executing tool fail")
    assert "Error:" in out["bad_args"][0].text and "seconds" in out["bad_args"][0].text
    assert out["not_a_dict"][0].text == "Error: arguments must be a JSON object, not list"
    assert out["crash"][0].text == (
        "Error: MCP server 'testing' went away during the call: the server closed the connection (it exited or crashed)"
    )
    assert int(out["restarted"][0].text) != first_pid, "the next call starts the server again"
    for name in ("slow", "raises", "crash"):
        _, reward, metrics = out[name]
        assert reward == 0.0 and metrics["tool_error"] == 1
    log = mb.read_call_logs(tmp_path)
    assert [r["tool"] for r in log] == ["pid", "sleep", "sleep", "fail", "sleep", "sleep", "crash", "pid"]
    assert [r["error"] for r in log] == [False, True, False, True, True, True, True, False]

    asyncio.run(mb.bridge().acall(mb.bridge().close_all()))
    assert not wait_gone(tag), "closing the bridge stops its stdio servers"


def test_an_unreachable_server_at_run_time_is_an_error_result(tmp_path):
    config = {
        "type": "native",
        "server": "gone",
        "server_spec": {"type": "sse", "url": f"http://127.0.0.1:{free_port()}/sse"},
        "mcp_tool": "calculator",
        "timeout": 2.0,
        "connect_timeout": 5.0,
    }
    response, _, metrics = asyncio.run(_execute(_tool(config), {"expression": "1"}))
    assert response.text.startswith("Error: MCP server 'gone' is unavailable: nothing answers at http://127.0.0.1:")
    assert metrics["tool_error"] == 1


def test_secrets_reach_the_server_but_no_config_or_log(tmp_path, monkeypatch):
    monkeypatch.setenv("API_TOKEN", SECRET)
    servers_file = tmp_path / "mcp.json"
    servers_file.write_text(json.dumps({"mcpServers": {"t": probe_server_entry(env={"API_TOKEN": SECRET})}}))
    found = mb.discover(mb.load_servers(servers_file))
    config = mb.tool_config(found, servers_file=servers_file, call_log_dir=tmp_path / "calls")
    path = mb.write_tool_config(tmp_path / "tools.yaml", config)
    assert SECRET not in path.read_text(), "the tool config names the servers file instead of copying it"
    entry = next(e for e in config["tools"] if e["config"]["mcp_tool"] == "env_length")
    response, _, _ = asyncio.run(_execute(_tool(entry["config"], entry["tool_schema"]), {"name": "API_TOKEN"}))
    assert response.text == str(len(SECRET)), "the server got the value"
    assert SECRET not in (tmp_path / "calls").joinpath(f"calls-{os.getpid()}.jsonl").read_text()

    with pytest.raises(TrainctlError, match="API_TOKEN would be written into the run's tool config as literal"):
        mb.tool_config(found)
    by_reference = mb.parse_servers({"mcpServers": {"t": probe_server_entry(env={"API_TOKEN": "${API_TOKEN}"})}})
    inline = mb.tool_config({"t": mb.Discovered(by_reference["t"], found["t"].tools, 0.0)})
    assert inline["tools"][0]["config"]["server_spec"]["env"] == {"API_TOKEN": "${API_TOKEN}"}
    asyncio.run(mb.bridge().acall(mb.bridge().close_all()))


def test_trajectory_sessions_get_a_server_each_and_close_with_the_trajectory():
    tag = uuid.uuid4().hex
    servers = _servers(testing=probe_server_entry("--tag", tag))
    entries = mb.tool_config(mb.discover(servers), session="trajectory")["tools"]
    pid_entry = next(e for e in entries if e["config"]["mcp_tool"] == "pid")
    tool = _tool(pid_entry["config"], pid_entry["tool_schema"])

    class Trajectory:  # what verl's loop passes as agent_data: a request_id per trajectory
        def __init__(self):
            self.request_id = uuid.uuid4().hex

    async def scenario():
        a, b = Trajectory(), Trajectory()
        pids = [(await _execute(tool, {}, t))[0].text for t in (a, b, a)]
        return pids, a, b

    (pid_a, pid_b, pid_a_again), a, b = asyncio.run(scenario())
    assert pid_a == pid_a_again != pid_b
    assert len(processes_running(tag)) == 2
    del a, b
    gc.collect()
    assert not wait_gone(tag), "a trajectory's server stops when verl drops the trajectory"


CHILD = textwrap.dedent(
    """
    import asyncio, sys, time
    from trainctl.runtime import mcp_bridge as mb
    spec = mb.parse_server("t", {"command": sys.executable, "args": [sys.argv[1], "--tag", sys.argv[2]]})
    print(asyncio.run(mb.call_tool(spec, "pid", {}))[0], flush=True)
    if sys.argv[3] == "exit":
        sys.stdin.readline()  # exit when the test says, after it has seen the server running
        sys.exit(0)
    time.sleep(600)
    """
)


@pytest.mark.parametrize("how", ["exit", "SIGINT", "SIGTERM", "SIGKILL"])
def test_stdio_servers_stop_with_the_process_that_started_them(tmp_path, how):
    """Ctrl-C, a kill or a normal exit of the process running the bridge leaves no server behind."""
    from tests.runtime.mcp_fixtures import TEST_SERVER

    tag = uuid.uuid4().hex
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(TEST_SERVER), tag, "exit" if how == "exit" else "wait"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        server_pid = int(child.stdout.readline())
        marker = f"--tag {tag}"  # the server's command line (the child's holds the tag alone)
        assert [p.pid for p in processes_running(marker)] == [server_pid]
        if how == "exit":
            child.stdin.write("exit\n")
            child.stdin.flush()
        else:
            child.send_signal(getattr(signal, how))
        child.wait(30)
        assert not wait_gone(marker), f"the MCP server outlived its parent ({how})"
    finally:
        child.kill()
        child.wait()
        for pipe in (child.stdin, child.stdout):
            if pipe:
                pipe.close()
