"""MCP servers before a run: what a server entry is, and what a server offers.

specs       ServerSpec (a stdio command, or an sse / streamable-http URL) from an mcpServers file or tools.servers;
            every mistake an entry can hold is found here, at plan time; `${VAR}` references are expanded only
            when a server starts
connection  one MCP client session, held open by one task on an event loop; why a server could not be used
discovery   connect to each server once, list its tools, disconnect (plan time)
schemas     an MCP tool's input schema as the OpenAI function schema verl validates
results     a call's result as the text the model reads

A leaf: it imports trainctl.errors, .secrets and .paths only (the `mcp` SDK when it connects, never verl), so the
checks, the CLI and the worker-side bridge (trainctl.runtime.mcp_bridge: the process's event-loop thread, its
connections, the verl tool class, call logs) all build on it. The translation into verl's tool config
(<run>/tools.yaml, the multi_turn keys) is trainctl.backends.tools.
"""
