"""The MCP bridge (the worker side) against real MCP server processes: stdio ones it starts, SSE / streamable-HTTP
ones on 127.0.0.1. The servers file and discovery (plan time) are tested in tests/mcp/, the tool config in
tests/backends/test_tools.py."""

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
    calculator_file,
    free_port,
    http_server,
    probe_server_entry,
    processes_running,
    wait_gone,
)
from trainctl.backends.tools import tool_config, write_tool_config
from trainctl.errors import TrainctlError
from trainctl.mcp.discovery import Discovered, discover
from trainctl.mcp.specs import ServerSpec, load_servers, parse_servers
from trainctl.runtime import mcp_bridge as mb
from trainctl.runtime.tool_calls import read_call_logs

SECRET = "s3cr3t-value-0123456789"


def _servers(**entries) -> dict[str, ServerSpec]:
    return parse_servers({"mcpServers": entries})


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


# --- calls ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("transport,path", [("sse", "/sse"), ("streamable-http", "/mcp")])
def test_a_server_over_http_on_localhost(tmp_path, transport, path):
    port = free_port()
    log = tmp_path / "calc.log"
    argv = [sys.executable, str(calculator_file()), "--transport", transport, "--port", str(port), "--log", str(log)]
    with http_server(argv, port) as proc:
        servers = _servers(calc={"type": transport, "url": f"http://127.0.0.1:{port}{path}"})
        found = discover(servers)
        [entry] = tool_config(found)["tools"]
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
    found = discover(servers)
    entries = {e["config"]["mcp_tool"]: e for e in tool_config(found, timeout=3.0, call_log_dir=tmp_path)["tools"]}
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
    log = read_call_logs(tmp_path)
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


def test_what_changed_since_the_plan_is_the_calls_error_result_never_a_config_error(tmp_path, monkeypatch):
    """The plan checked every entry (tests/checks/test_tools.py); a worker validates nothing. An mcpServers file
    edited or removed since, or a variable missing from the worker's environment, is the answer the model reads."""
    monkeypatch.delenv("TRAINCTL_TEST_WORKER_VAR", raising=False)
    servers_file = tmp_path / "mcp.json"  # the plan read it with a server "calc" in it
    by_file = {"type": "native", "server": "calc", "servers_file": str(servers_file), "mcp_tool": "calculator"}
    by_spec = {
        "type": "native",
        "server": "t",
        "server_spec": {"command": sys.executable, "args": ["x.py"], "env": {"K": "${TRAINCTL_TEST_WORKER_VAR}"}},
        "mcp_tool": "calculator",
        "call_log_dir": str(tmp_path / "calls"),
    }
    removed = asyncio.run(_execute(_tool(by_file), {"expression": "1"}))
    servers_file.write_text(json.dumps({"mcpServers": {"other": {"command": "srv"}}}))
    renamed = asyncio.run(_execute(_tool(by_file), {"expression": "1"}))
    unset = asyncio.run(_execute(_tool(by_spec), {"expression": "1"}))

    assert (
        renamed[0].text
        == f"Error: MCP server 'calc' is unavailable: {servers_file} no longer names it (it names ['other'])"
    )
    assert (
        removed[0].text == f"Error: MCP server 'calc' is unavailable: MCP servers file {servers_file} does not exist."
    )
    assert unset[0].text == (
        "Error: MCP server 't' is unavailable: env K refers to ${TRAINCTL_TEST_WORKER_VAR}, which is not set in the "
        "environment"
    )
    assert [r[2]["tool_error"] for r in (renamed, removed, unset)] == [1, 1, 1]
    assert read_call_logs(tmp_path / "calls")[0]["error"] is True


def test_secrets_reach_the_server_but_no_config_or_log(tmp_path, monkeypatch):
    monkeypatch.setenv("API_TOKEN", SECRET)
    servers_file = tmp_path / "mcp.json"
    servers_file.write_text(json.dumps({"mcpServers": {"t": probe_server_entry(env={"API_TOKEN": SECRET})}}))
    found = discover(load_servers(servers_file))
    config = tool_config(found, servers_file=servers_file, call_log_dir=tmp_path / "calls")
    path = write_tool_config(tmp_path / "tools.yaml", config)
    assert SECRET not in path.read_text(), "the tool config names the servers file instead of copying it"
    entry = next(e for e in config["tools"] if e["config"]["mcp_tool"] == "env_length")
    response, _, _ = asyncio.run(_execute(_tool(entry["config"], entry["tool_schema"]), {"name": "API_TOKEN"}))
    assert response.text == str(len(SECRET)), "the server got the value"
    assert SECRET not in (tmp_path / "calls").joinpath(f"calls-{os.getpid()}.jsonl").read_text()

    with pytest.raises(TrainctlError, match="API_TOKEN would be written into the run's tool config as literal"):
        tool_config(found)
    by_reference = parse_servers({"mcpServers": {"t": probe_server_entry(env={"API_TOKEN": "${API_TOKEN}"})}})
    inline = tool_config({"t": Discovered(by_reference["t"], found["t"].tools, 0.0)})
    assert inline["tools"][0]["config"]["server_spec"]["env"] == {"API_TOKEN": "${API_TOKEN}"}
    asyncio.run(mb.bridge().acall(mb.bridge().close_all()))


def test_trajectory_sessions_get_a_server_each_and_close_with_the_trajectory():
    tag = uuid.uuid4().hex
    servers = _servers(testing=probe_server_entry("--tag", tag))
    entries = tool_config(discover(servers), session="trajectory")["tools"]
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


def test_a_shared_server_starts_when_a_worker_builds_its_tools_on_its_loop_and_not_for_a_schema_reader():
    tag = uuid.uuid4().hex
    entries = tool_config(discover(_servers(testing=probe_server_entry("--tag", tag))))["tools"]
    pid_entry = next(e for e in entries if e["config"]["mcp_tool"] == "pid")
    # verl's trainer builds the tools outside any event loop, only to read their schemas: no server for that
    _tool(pid_entry["config"], pid_entry["tool_schema"])
    time.sleep(1.0)
    assert processes_running(tag) == []

    async def worker():  # an agent-loop worker builds its tools on its event loop, long before the first call
        tool = _tool(pid_entry["config"], pid_entry["tool_schema"])
        deadline = time.monotonic() + 60
        while not processes_running(tag):
            assert time.monotonic() < deadline, "the server was not started when the tool was built"
            await asyncio.sleep(0.1)
        pid = (await _execute(tool, {}))[0].text
        assert [p.pid for p in processes_running(tag)] == [int(pid)], "the call used the server started in advance"
        return tool.spec(), int(pid)

    spec, pid = asyncio.run(worker())
    # the process's bridge holds it, not the loop: it serves the process's later calls, until the bridge closes it
    assert [p.pid for p in processes_running(tag)] == [pid]
    b = mb.bridge()
    b.run(b.close_key(("shared", spec)), timeout=30)
    assert not wait_gone(tag), "the server stops when the bridge closes its connection"


CHILD = textwrap.dedent(
    """
    import asyncio, sys, time
    from trainctl.mcp.specs import parse_server
    from trainctl.runtime import mcp_bridge as mb
    spec = parse_server("t", {"command": sys.executable, "args": [sys.argv[1], "--tag", sys.argv[2]]})
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
        child.wait(60)  # on a loaded machine, an asyncio shutdown after Ctrl-C takes seconds
        assert not wait_gone(marker), f"the MCP server outlived its parent ({how})"
    finally:
        child.kill()
        child.wait()
        for pipe in (child.stdin, child.stdout):
            if pipe:
                pipe.close()


# --- a server that dies mid-run (issue 26) ---------------------------------------------------------------------


def _entries(servers, log_dir, **kwargs) -> dict:
    return {e["config"]["mcp_tool"]: e for e in tool_config(discover(servers), call_log_dir=log_dir, **kwargs)["tools"]}


@pytest.mark.parametrize("built", ["outside a loop", "on the worker's loop"])
def test_a_stdio_server_killed_mid_run_is_started_again_and_counted(tmp_path, built):
    """The call in flight gets an error result, the next call starts the server again, the call log marks that
    call and the step's metrics count it: for tools built outside a loop and on the loop that then calls them
    (verl's agent-loop worker), both through the process's bridge thread."""
    from trainctl.runtime.tool_metrics import call_metrics

    tag = uuid.uuid4().hex
    entries = _entries(_servers(testing=probe_server_entry("--tag", tag)), tmp_path, timeout=20.0)

    def build():
        return {name: _tool(e["config"], e["tool_schema"]) for name, e in entries.items()}

    tools = build() if built == "outside a loop" else {}

    async def scenario():
        tools.update(tools or build())
        b = mb.bridge()
        restarts = b.restarts.get("testing", 0)  # the process's bridge has served earlier tests
        first = int((await _execute(tools["pid"], {}))[0].text)
        in_flight = asyncio.ensure_future(_execute(tools["sleep"], {"seconds": 15}))
        await asyncio.sleep(0.5)
        os.kill(first, signal.SIGKILL)
        start = time.perf_counter()
        killed = await in_flight
        waited = time.perf_counter() - start
        again = await _execute(tools["pid"], {})
        assert b.restarts.get("testing", 0) == restarts + 1
        return first, killed, waited, again

    first, killed, waited, again = asyncio.run(scenario())
    assert killed[0].text.startswith("Error: MCP server 'testing' went away during the call"), killed[0].text
    assert waited < 5, "the call in flight is answered when the server dies, not at its timeout"
    assert int(again[0].text) != first and again[2]["tool_error"] == 0
    log = read_call_logs(tmp_path)
    assert [(r["tool"], r["error"], r.get("server_restart", False)) for r in log] == [
        ("pid", False, False),
        ("sleep", True, False),
        ("pid", False, True),
    ]
    assert call_metrics(log, 1)["tool/server_restarts"] == 1.0
    # where a call's time went: the server's part and the hops between the caller's loop and the bridge's
    ok = log[0]
    assert ok["seconds"] >= ok["server_seconds"] > 0 and ok["hop_in_seconds"] >= 0 and ok["hop_out_seconds"] >= 0
    asyncio.run(mb.bridge().acall(mb.bridge().close_all()))
    assert not wait_gone(tag)


def test_an_sse_server_stopped_and_started_again_is_reconnected_after_a_pause(tmp_path, monkeypatch):
    from tests.runtime.mcp_fixtures import TEST_SERVER

    monkeypatch.setattr(mb, "RETRY_FIRST_S", 0.5)
    port = free_port()
    argv = [sys.executable, str(TEST_SERVER), "--transport", "sse", "--port", str(port)]
    servers = _servers(testing={"type": "sse", "url": f"http://127.0.0.1:{port}/sse"})
    with http_server(argv, port) as proc:
        entries = _entries(servers, tmp_path, timeout=20.0, connect_timeout=5.0)
        tools = {name: _tool(e["config"], e["tool_schema"]) for name, e in entries.items()}

        async def until_stopped():
            before = (await _execute(tools["pid"], {}))[0].text
            in_flight = asyncio.ensure_future(_execute(tools["sleep"], {"seconds": 15}))
            await asyncio.sleep(0.5)
            proc.kill()
            killed = await in_flight
            return before, killed, await _execute(tools["pid"], {}), await _execute(tools["pid"], {})

        before, killed, down, paused = asyncio.run(until_stopped())
        assert int(before) == proc.pid
    assert killed[0].text.startswith("Error: MCP server 'testing' went away during the call"), killed[0].text
    assert down[0].text.startswith("Error: MCP server 'testing' is unavailable: nothing answers at"), down[0].text
    assert paused[0].text.startswith("Error: MCP server 'testing' is unavailable (nothing answers at"), paused[0].text
    assert "the next try to reach it is in" in paused[0].text, "no connection attempt while it pauses"

    with http_server(argv, port) as proc:  # the same port again

        async def after_restart():
            deadline = time.monotonic() + 15
            while True:
                answer = await _execute(tools["pid"], {})
                if not answer[0].text.startswith("Error:") or time.monotonic() > deadline:
                    return answer
                await asyncio.sleep(0.25)

        back = asyncio.run(after_restart())
        assert back[0].text == str(proc.pid), back[0].text
    log = read_call_logs(tmp_path)
    assert [r.get("server_restart", False) for r in log].count(True) == 1 and log[-1]["server_restart"] is True
    asyncio.run(mb.bridge().acall(mb.bridge().close_all()))
