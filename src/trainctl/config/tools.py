"""What the tools section means for verl: the MCP servers and Python functions a run's model may call, the verl keys
a tools choice sets, and the tool config verl reads (<run>/tools.yaml, written at launch).

verl 0.9.1 runs tools in its tool agent loop (verl/experimental/agent_loop/tool_agent_loop.py), switched on by
`actor_rollout_ref.rollout.multi_turn.enable` and chosen for every row by `rollout.agent.default_agent_loop`
(a row's `agent_name` column wins). Tools are classes named in the YAML file at `multi_turn.tool_config_path`:
MCP tools go through trainctl's bridge (trainctl.runtime.mcp_bridge.MCPTool), functions through
trainctl.runtime.python_tool.PythonFunctionTool. Both write one line per call under <run>/tools/calls/, which the
tool metrics read (trainctl.runtime.tool_metrics).

The mapping table (conf/mapping/verl_ppo.yaml) calls `verl_value` through the `tc.tools` resolver; the checks
(trainctl.checks.tools) and the launcher call the rest.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainctl.config.schema import Tools
    from trainctl.runtime.mcp_bridge import Discovered, ServerSpec

TOOL_AGENT = "tool_agent"  # the name verl registers ToolAgentLoop under
TOOL_CONFIG = "tools.yaml"  # in the run folder
CALLS_DIR = "tools/calls"  # in the run folder: one JSONL per process that called tools
ROLLOUTS_DIR = "rollouts"  # in the run folder: verl's rollout dumps (trainer.rollout_data_dir), one JSONL per step
BUILTIN_TOOLS = Path(__file__).resolve().parent.parent / "runtime" / "tools"
_TRANSPORT = {"stdio": "stdio", "sse": "sse", "http": "streamable-http"}


def _get(tools: Any, key: str, default: Any = None) -> Any:
    return tools.get(key, default) if isinstance(tools, dict) else getattr(tools, key, default)


def enabled(tools: Any) -> bool:
    """Whether a tools section names any tool source (a Tools, or its dict in the mapping's resolvers)."""
    return bool(_get(tools, "servers") or _get(tools, "servers_file") or _get(tools, "functions"))


def run_path(run_dir: str | Path, what: str) -> Path:
    return Path(run_dir).expanduser().resolve() / what


def verl_value(tools: Any, run_dir: str, field: str) -> Any:
    """The verl value a tools choice sets for one key (the mapping's `tc.tools` resolver); None: verl's default."""
    if not enabled(tools):
        return None
    turns = int(_get(tools, "max_assistant_turns"))
    tool_turns = _get(tools, "max_tool_turns")
    values = {
        "enable": True,
        "format": _get(tools, "format"),
        "tool_config_path": str(run_path(run_dir, TOOL_CONFIG)),
        "max_assistant_turns": turns,
        # tool results come back as user turns in verl's count
        "max_user_turns": int(tool_turns) if tool_turns is not None else max(1, turns - 1),
        "max_parallel_calls": int(_get(tools, "max_parallel_calls")),
        "max_tool_response_length": int(_get(tools, "max_tool_response_length")),
        "default_agent_loop": TOOL_AGENT,
        "rollout_data_dir": str(run_path(run_dir, ROLLOUTS_DIR)),
    }
    return values[field]


def builtin_tool(name: str) -> str:
    """The file of a tool server trainctl ships (runtime/tools/NAME.py): stdio servers are started by path."""
    path = BUILTIN_TOOLS / f"{name}.py"
    if not path.is_file():
        found = sorted(p.stem for p in BUILTIN_TOOLS.glob("*.py") if not p.stem.startswith("_"))
        raise ValueError(f"trainctl ships no tool server {name!r} (it ships: {', '.join(found)})")
    return str(path)


def python() -> str:
    """The Python running trainctl: it has the mcp package the built-in servers need."""
    return sys.executable


# -- servers ----------------------------------------------------------------------------------------------------


def inline_spec(name: str, server: Any) -> ServerSpec:
    """A tools.servers entry (a ToolServer) as the bridge's ServerSpec; env names become `${NAME}` references,
    expanded from the environment only when the server starts."""
    from trainctl.runtime.mcp_bridge import ServerSpec

    transport = _TRANSPORT[_get(server, "transport")]
    if transport == "stdio":
        env = tuple((n, "${" + n + "}") for n in _get(server, "env") or [])
        return ServerSpec(
            name,
            "stdio",
            command=_get(server, "command"),
            args=tuple(str(a) for a in _get(server, "args") or []),
            env=env,
            cwd=_get(server, "cwd"),
        )
    return ServerSpec(name, transport, url=_get(server, "url"))


def server_specs(tools: Tools) -> tuple[dict[str, ServerSpec], dict[str, ServerSpec]]:
    """(inline servers, servers from tools.servers_file), by name. Raises TrainctlError/ConfigProblems for a file
    that cannot be read or parsed."""
    from trainctl.runtime.mcp_bridge import load_servers

    inline = {name: inline_spec(name, s) for name, s in tools.servers.items()}
    from_file = load_servers(tools.servers_file) if tools.servers_file else {}
    return inline, from_file


def allowed(tools: Tools, name: str) -> list[str] | None:
    server = tools.servers.get(name)
    return list(server.tools) if server is not None and server.tools is not None else None


# listings of stdio servers per command (command, args, env names, cwd): the plans of a sweep start each server once.
# A stdio run starts its own server from the same command; a URL is asked every time (the check is that it answers
# now), and a failure is never cached.
_DISCOVERED: dict[Any, Discovered] = {}
_LOCK = threading.Lock()


def discover(specs: dict[str, ServerSpec], timeout: float) -> dict[str, Discovered]:
    """Each server's tools, listed through the MCP bridge (servers not seen before in this process, at once).
    Raises ConfigProblems naming each server that could not be started or reached."""
    from trainctl.runtime import mcp_bridge

    with _LOCK:
        cached = {n: _DISCOVERED[s] for n, s in specs.items() if s in _DISCOVERED}
        todo = {n: s for n, s in specs.items() if n not in cached}
        found = mcp_bridge.discover(todo, timeout=timeout) if todo else {}
        for name, d in found.items():
            if todo[name].transport == "stdio":
                _DISCOVERED[todo[name]] = d
        return {n: cached.get(n) or found[n] for n in specs}


def forget_discovered() -> None:
    """Drop the cached listings (tests; a server whose tools changed)."""
    with _LOCK:
        _DISCOVERED.clear()


# -- the tool config verl reads -----------------------------------------------------------------------------------


def tool_config_document(
    tools: Tools,
    inline: dict[str, Discovered],
    from_file: dict[str, Discovered],
    functions: dict[str, dict],
    run_dir: str | Path,
) -> dict:
    """The YAML document for multi_turn.tool_config_path: MCP tools (only those each server allows) and function
    tools. Secret values never enter it: inline servers carry `${NAME}` references, servers from a file name the
    file."""
    import dataclasses

    from trainctl.errors import TrainctlError
    from trainctl.runtime import mcp_bridge, python_tool

    calls = str(run_path(run_dir, CALLS_DIR))

    def narrowed(found: dict[str, Discovered]) -> dict[str, Discovered]:
        out = {}
        for name, d in found.items():
            keep = allowed(tools, name)
            out[name] = d if keep is None else dataclasses.replace(d, tools=[t for t in d.tools if t.name in keep])
        return out

    common = {
        "timeout": tools.call_timeout_s,
        "connect_timeout": tools.connect_timeout_s,
        "session": tools.session,
        "call_log_dir": calls,
    }
    entries: list[dict] = []
    if inline:
        entries += mcp_bridge.tool_config(narrowed(inline), **common)["tools"]
    if from_file:
        entries += mcp_bridge.tool_config(narrowed(from_file), servers_file=tools.servers_file, **common)["tools"]
    for spec, schema in functions.items():
        entries.append(python_tool.tool_entry(spec, schema, tools.call_timeout_s, calls))
    seen: dict[str, str] = {}
    for entry in entries:
        name = entry["tool_schema"]["function"]["name"]
        source = entry["config"].get("server") or entry["config"].get("function")
        if name in seen:
            raise TrainctlError(
                f"tool name {name!r} is given by both {seen[name]!r} and {source!r}.",
                hint="tool names must be unique: drop one, or narrow a server's tools (tools.servers.NAME.tools)",
            )
        seen[name] = source
    return {"tools": entries}


def write_tool_config(path: str | Path, document: dict) -> Path:
    from trainctl.runtime.mcp_bridge import write_tool_config as write

    return write(path, document)
