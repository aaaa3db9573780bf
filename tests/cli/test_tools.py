"""`trainctl tools ls|call` against real MCP server processes: the built-in calculator over stdio and streamable HTTP,
and a second server with other tools, written here, over stdio and SSE; function tools; and the errors (an unknown
server or tool, arguments the server refuses, a timeout) with their exit codes."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from tests.runtime.mcp_fixtures import calculator_file, free_port, http_server, wait_gone

NOTES_SERVER = textwrap.dedent(
    '''
    """A second MCP server for the tests: a lookup that answers long text, a sum with typed arguments, a slow tool."""
    import argparse, asyncio, logging

    from mcp.server.mcpserver import MCPServer

    logging.basicConfig(level=logging.WARNING)
    server = MCPServer("notes", version="0.3.1", log_level="WARNING")


    @server.tool(description="Look a word up in the notes.")
    def lookup(word: str) -> str:
        return f"{word}: " + "a very long note. " * 20


    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> str:
        return str(a + b)


    @server.tool(description="Answer after a while.")
    async def slow(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "done"


    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", default="stdio")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run(args.transport, host="127.0.0.1", port=args.port)
    '''
)


@pytest.fixture
def notes(tmp_path):
    path = tmp_path / "notes_server.py"
    path.write_text(NOTES_SERVER)
    return path


def test_ls_and_call_a_stdio_server_and_a_function(cli, tiny_model, notes):
    """The calculator (tools=calculator, started over stdio as a run starts it) and the test's notes server, a
    servers file's server narrowed by an override; token costs with model=tiny's chat template."""
    servers = notes.parent / "mcp.json"
    servers.write_text(json.dumps({"mcpServers": {"notes": {"command": sys.executable, "args": [str(notes)]}}}))
    both = ["tools=calculator", f"tools.servers_file={servers}", "tools.servers.notes.tools=[lookup,add]"]
    listed = cli("tools", "ls", *both)
    assert listed.exit_code == 0, listed.output
    lines = [" ".join(line.split()) for line in listed.stdout.splitlines()]
    assert any(line.startswith("calculator (tools.servers) stdio: ") for line in lines), listed.stdout
    assert "server calculator" in listed.stdout and f"notes ({servers}) stdio: " in " ".join(lines)
    assert "server notes 0.3.1" in listed.stdout, "name and version from MCP's initialize"
    assert "expression: string (required) e.g. 12 * (3 + 4)" in lines
    assert "a: integer (required) A" in lines and "word: string (required) Word" in lines, "titles stand in"
    slow = lines.index(next(line for line in lines if line.startswith("slow ")))
    assert lines[slow + 2] == "not given to the model (tools.servers.notes.tools leaves it out)"
    total = next(line for line in lines if line.startswith("Schemas of the 3 tools the model may call: "))
    assert "prompt tokens of every prompt with model=tiny's chat template" in total
    tokens = {line.split()[0]: int(line.split()[1]) for line in lines if line.split()[2:3] == ["tokens"]}
    assert sorted(tokens) == ["add", "calculator", "lookup", "slow"] and min(tokens.values()) > 10, tokens
    together = int(total.split(": ")[1].split()[0])
    assert together > tokens["calculator"] + tokens["lookup"], "the three allowed schemas at once"

    called = cli("tools", "call", "calculator.calculator", "--args", '{"expression": "6 * (3 + 4)"}', *both)
    assert called.exit_code == 0, called.output
    assert called.stdout == "42\n" and "calculator.calculator: answered in " in called.stderr
    refused = cli("tools", "call", "notes.add", "--args", '{"a": 1, "b": "two"}', *both)
    assert refused.exit_code == 4, refused.output
    assert refused.stdout.startswith("Error: Error executing tool add:") and "int_parsing" in refused.stdout
    assert "cut to tools.max_tool_response_length = 64 characters, as the model reads it" in refused.stderr

    fn = cli("tools", "call", "calculator", "--args", '{"expression": "2 ** 10"}', "tools=calculator-fn")
    assert fn.exit_code == 0 and fn.stdout == "1024\n", fn.output
    assert not wait_gone(str(notes), timeout=10), "every stdio server stopped again"


def test_unknown_servers_tools_and_arguments(cli, notes):
    """Did-you-mean for a server or tool name; a usage error for --args that are not a JSON object."""
    unknown = cli("tools", "call", "calculater.calculator", "--args", "{}", "tools=calculator")
    assert unknown.exit_code == 1, unknown.output
    assert "no MCP server 'calculater' in tools=calculator (its servers: calculator)." in unknown.stderr
    assert "Did you mean 'calculator'?" in unknown.stderr
    assert "trainctl tools call calculator.calculator" in unknown.stderr
    tool = cli("tools", "call", "calculator.calculater", "--args", "{}", "tools=calculator")
    assert tool.exit_code == 1, tool.output
    assert "MCP server 'calculator' lists no tool 'calculater' (it lists: calculator)." in tool.stderr
    assert "Did you mean 'calculator'?" in tool.stderr
    usage = cli("tools", "call", "calculator.calculator", "--args", "[6, 7]", "tools=calculator")
    assert usage.exit_code == 2 and "--args must be a JSON object" in usage.stderr, usage.output
    none = cli("tools", "ls", "tools=none")
    assert none.exit_code == 1 and "tools=none gives the model no tools." in none.stderr


def test_servers_over_sse_and_streamable_http(cli, tiny_model, notes):
    """Servers reached at their URLs (each a process on 127.0.0.1), listed together from an mcpServers file; a long
    answer is cut as verl cuts it, a slow call times out (exit 5), a server that is not there is named."""
    sse, http = free_port(), free_port()
    servers = notes.parent / "mcp.json"
    servers.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "notes": {"type": "sse", "url": f"http://127.0.0.1:{sse}/sse"},
                    "calc": {"type": "http", "url": f"http://127.0.0.1:{http}/mcp"},
                }
            }
        )
    )
    args = ["tools=none", f"tools.servers_file={servers}", "tools.max_tool_response_length=32"]
    args += ["data.max_prompt_length=256"]
    notes_argv = [sys.executable, str(notes), "--transport", "sse", "--port", str(sse)]
    calc_argv = [sys.executable, str(calculator_file()), "--transport", "streamable-http", "--port", str(http)]
    with http_server(notes_argv, sse), http_server(calc_argv, http):
        listed = cli("tools", "ls", *args)
        assert listed.exit_code == 0, listed.output
        text = " ".join(listed.stdout.split())
        assert f"notes ({servers}) sse: http://127.0.0.1:{sse}/sse" in text
        assert f"calc ({servers}) streamable-http: http://127.0.0.1:{http}/mcp" in text
        assert "Schemas of the 4 tools the model may call" in text and "(data.max_prompt_length = 256)" in text
        # the four schemas overflow the tiny prompt budget: the hint keeps what fits in half of it, runnable as is
        hint = listed.stderr.split("allow fewer tools: ")[1].split()
        assert hint[0].startswith("'tools.servers.") and hint[0].endswith("]'"), listed.stderr
        fits = cli("tools", "ls", *args, *(h.strip("'") for h in hint))
        assert fits.exit_code == 0 and "Warning" not in fits.stderr, fits.output

        long = cli("tools", "call", "notes.lookup", "--args", '{"word": "mcp"}', *args, "--json")
        assert long.exit_code == 0, long.output
        report = json.loads(long.stdout)
        assert report["text"] == "mcp: a very long...(truncated)...very long note. " and report["truncated"] is True
        assert report["chars"] > 32 and report["seconds"] < report["connect_seconds"] + 5
        calc = cli("tools", "call", "calc.calculator", "--args", '{"expression": "1 / 0"}', *args)
        assert calc.exit_code == 4 and calc.stdout.startswith("Error: "), calc.output
        slow = cli("tools", "call", "notes.slow", "--args", '{"seconds": 30}', "--timeout", "1", *args)
        assert slow.exit_code == 5, slow.output
        assert slow.stdout == "Error: the call ...(truncated)...ed out after 1 s\n", "cut, as the model reads it"
        assert "notes.slow: no answer in " in slow.stderr
    gone = cli("tools", "ls", *args, "tools.connect_timeout_s=5")
    assert gone.exit_code == 1, gone.output
    assert "MCP server 'notes' could not be reached: nothing answers at" in gone.stderr
    assert f"curl -sN http://127.0.0.1:{sse}/sse" in gone.stderr
