"""The built-in calculator MCP server: one tool, `calculator(expression)`, that evaluates arithmetic safely.

    python -m trainctl.runtime.tools.calculator                       # stdio (what a run starts by itself)
    python -m trainctl.runtime.tools.calculator --transport sse --port 8001     # http://127.0.0.1:8001/sse
    python -m trainctl.runtime.tools.calculator --transport streamable-http --port 8001   # .../mcp

`--log FILE` appends one JSON line per call (pid, expression, result or error): a record, written by the server
process itself, of what it was asked and what it answered.

Over stdio it reads and writes its pipes on the event loop itself (`serve_stdio_pipes`) rather than through the
SDK's stdio transport, which reads each line and writes each answer in a worker thread: three thread hops a call.
On 2 cores, 64 calls sent at once: 1.7 ms of the server's CPU per call there against 0.6 ms here, the median call
87 ms against 26 ms; 27 at once (benchmarks/bench_agents.py, `BENCH_AGENTS_ONLY=burst`): 41.6 ms against 14.2 ms.

This file imports nothing from trainctl, so a run can start it by path (`python .../calculator.py`) in the
minimal environment the MCP SDK gives stdio servers (no PYTHONPATH).
"""

import argparse
import ast
import asyncio
import gc
import json
import operator
import os
import stat
import time

NAME = "calculator"
DESCRIPTION = "Evaluate arithmetic."
EXPRESSION_HELP = "e.g. 12 * (3 + 4)"
EXAMPLE = "12 * (3 + 4)"
MAX_CHARS = 200
MAX_EXPONENT = 64
MAX_MAGNITUDE = 10**100

# Python's own parser reads the expression; only these nodes are evaluated, so no name, call, attribute or
# subscript can run (a dozen lines did not justify a dependency such as simpleeval).
_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


class CalculatorError(ValueError):
    """An expression the calculator will not evaluate; the message says why."""


def _eval(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise CalculatorError(f"exponent {right} is too large (at most {MAX_EXPONENT})")
        if isinstance(node.op, ast.Div | ast.FloorDiv | ast.Mod) and right == 0:
            raise CalculatorError("division by zero")
        value = _BINARY[type(node.op)](left, right)
        if isinstance(value, complex):
            raise CalculatorError("the result is not a real number")
        if abs(value) > MAX_MAGNITUDE:
            raise CalculatorError("the result is too large")
        return value
    raise CalculatorError(f"unsupported syntax: {ast.unparse(node)!r} (only numbers, + - * / // % ** and parentheses)")


def evaluate(expression: str) -> int | float:
    """The value of an arithmetic expression; CalculatorError for anything else."""
    if not isinstance(expression, str) or not expression.strip():
        raise CalculatorError("the expression is empty")
    if len(expression) > MAX_CHARS:
        raise CalculatorError(f"the expression is too long ({len(expression)} characters, at most {MAX_CHARS})")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as e:
        raise CalculatorError(f"not an arithmetic expression: {expression!r} ({e.msg})") from None
    return _eval(tree.body)


def format_number(value: int | float) -> str:
    """Integers as integers (7, not 7.0), other floats to 10 significant digits."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, float):
        return f"{value:.10g}"
    return str(value)


def calculate(expression: str) -> str:
    """The text the tool returns: the formatted value."""
    return format_number(evaluate(expression))


def _append_log(path: str | None, record: dict) -> None:
    if not path:
        return
    # the log's folder may not exist yet (a run's tools/ folder): a call must not fail for it
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    # one write of one line: concurrent servers appending to the same file do not interleave lines
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def _version() -> str:
    """trainctl's version (this server ships with it), read from its metadata: this file imports no trainctl."""
    import importlib.metadata

    try:
        return importlib.metadata.version("trainctl")
    except importlib.metadata.PackageNotFoundError:
        return ""


def build_server(log_path: str | None = None):
    from typing import Annotated

    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations
    from pydantic import Field

    server = MCPServer(NAME, instructions=DESCRIPTION, version=_version(), log_level="WARNING")

    # read-only: it changes nothing, so trainctl's tokenization preflight may call it (trainctl.toolenv.preflight)
    read_only = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)

    @server.tool(name=NAME, description=DESCRIPTION, annotations=read_only, structured_output=False)
    async def calculator(expression: Annotated[str, Field(description=EXPRESSION_HELP, examples=[EXAMPLE])]) -> str:
        record = {"pid": os.getpid(), "time": time.time(), "expression": expression}
        try:
            result = calculate(expression)
        except CalculatorError as e:
            _append_log(log_path, {**record, "error": str(e)})
            raise ToolError(str(e)) from None  # the client gets the message, the server log no traceback
        _append_log(log_path, {**record, "result": result})
        return result

    return server


class _PipeLines:
    """The lines of a pipe, read on the event loop (the SDK's stdio transport takes any async iterable of lines)."""

    def __init__(self, reader: asyncio.StreamReader):
        self.reader = reader

    def __aiter__(self):
        return self

    async def __anext__(self) -> str:
        line = await self.reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


class _PipeWriter:
    """Text written to a pipe on the event loop (what the SDK's stdio transport calls: write, then flush)."""

    def __init__(self, writer: asyncio.StreamWriter):
        self.writer = writer

    async def write(self, text: str) -> None:
        self.writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self.writer.drain()


def _is_pipe(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


# an MCP message is one line: the reader's buffer must hold the longest (asyncio's default is 64 KiB)
MAX_LINE = 64 * 1024 * 1024


async def serve_stdio_pipes(server) -> None:
    """Serve `server` (an MCPServer) over this process's stdin and stdout pipes, read and written on the loop.

    As the SDK does while it serves, fd 0 then reads the null device and fd 1 writes to stderr, so stray output
    (a library's print) cannot corrupt the wire."""
    from mcp.server.stdio import stdio_server

    loop = asyncio.get_running_loop()
    wire_in = os.fdopen(os.dup(0), "rb", buffering=0)
    wire_out = os.fdopen(os.dup(1), "wb", buffering=0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    reader = asyncio.StreamReader(limit=MAX_LINE)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), wire_in)
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, wire_out)
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    lowlevel = server._lowlevel_server  # what MCPServer.run_stdio_async runs, with these streams instead
    async with stdio_server(_PipeLines(reader), _PipeWriter(writer)) as (read_stream, write_stream):
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m trainctl.runtime.tools.calculator", description=__doc__)
    parser.add_argument("--transport", choices=["stdio", "sse", "streamable-http"], default="stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--log", default=os.environ.get("TRAINCTL_CALCULATOR_LOG"), help="append each call here")
    args = parser.parse_args(argv)
    gc.disable()  # while the MCP SDK loads (~0.6 s of CPU, 7% of it the collector's), its objects frozen after
    server = build_server(args.log)
    gc.freeze()
    gc.enable()
    if args.transport == "stdio" and _is_pipe(0) and _is_pipe(1) and hasattr(server, "_lowlevel_server"):
        import anyio

        anyio.run(serve_stdio_pipes, server)
    elif args.transport == "stdio":  # a terminal or a file: the SDK's own transport reads anything
        server.run("stdio")
    else:
        server.run(args.transport, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
