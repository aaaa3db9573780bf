"""The built-in calculator MCP server: one tool, `calculator(expression)`, that evaluates arithmetic safely.

    python -m trainctl.runtime.tools.calculator                       # stdio (what a run starts by itself)
    python -m trainctl.runtime.tools.calculator --transport sse --port 8001     # http://127.0.0.1:8001/sse
    python -m trainctl.runtime.tools.calculator --transport streamable-http --port 8001   # .../mcp

`--log FILE` appends one JSON line per call (pid, expression, result or error): a record, written by the server
process itself, of what it was asked and what it answered.

This file imports nothing from trainctl, so a run can start it by path (`python .../calculator.py`) in the
minimal environment the MCP SDK gives stdio servers (no PYTHONPATH).
"""

import argparse
import ast
import json
import operator
import os
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m trainctl.runtime.tools.calculator", description=__doc__)
    parser.add_argument("--transport", choices=["stdio", "sse", "streamable-http"], default="stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--log", default=os.environ.get("TRAINCTL_CALCULATOR_LOG"), help="append each call here")
    args = parser.parse_args(argv)
    server = build_server(args.log)
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run(args.transport, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
