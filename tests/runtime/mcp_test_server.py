"""An MCP server for the bridge's tests, run as a real process: tools that sleep, raise, exit and read the env.

python tests/runtime/mcp_test_server.py [--transport stdio|sse|streamable-http --port N] [--fail-start] [--tag TEXT]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from typing import Annotated

from pydantic import Field


def build():
    from mcp.server.mcpserver import MCPServer

    # Plain log lines: MCPServer's default handler renders each tool's exception as a rich traceback, which takes
    # 0.5 s on an idle machine and seconds on a loaded one, racing the tests' short call timeouts. basicConfig
    # here comes first, so MCPServer's own (also basicConfig) leaves this one in place.
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    server = MCPServer("testing", log_level="WARNING")

    @server.tool(description="Wait, then answer.")
    async def sleep(seconds: Annotated[float, Field(description="how long to wait")]) -> str:
        await asyncio.sleep(seconds)
        return f"slept {seconds:g} s"

    @server.tool(description="Raise an exception with the given message.")
    def fail(message: str) -> str:
        raise RuntimeError(message)

    @server.tool(description="Exit the server process at once (a crash).")
    def crash() -> str:
        os._exit(3)

    @server.tool(description="Length of an environment variable's value (the value itself is never returned).")
    def env_length(name: str) -> str:
        return str(len(os.environ.get(name, "")))

    @server.tool(description="This server's process id.")
    def pid() -> str:
        return str(os.getpid())

    @server.tool(description="Pick a colour.")
    def pick(colour: Annotated[str, Field(description="the colour")], times: int | None = None) -> str:
        return colour * (times or 1)

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", default="stdio")
    parser.add_argument("--port", type=int, default=8002)
    parser.add_argument("--fail-start", action="store_true", help="print a reason to stderr and exit 2")
    parser.add_argument("--tag", default="", help="ignored: lets a test find its own server processes")
    args = parser.parse_args()
    if args.fail_start:
        print(f"testing server: cannot start, API_TOKEN={os.environ.get('API_TOKEN', '')} rejected", file=sys.stderr)
        sys.exit(2)
    server = build()
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run(args.transport, host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
