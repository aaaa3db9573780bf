"""What the tools section means for verl: the keys a tools choice sets, and the tool config verl reads
(<run>/tools.yaml, written at launch from the plan's listings).

verl 0.9.1 runs tools in its tool agent loop (verl/experimental/agent_loop/tool_agent_loop.py), switched on by
`actor_rollout_ref.rollout.multi_turn.enable` and chosen for every row by `rollout.agent.default_agent_loop`
(a row's `agent_name` column wins). Tools are classes named in the YAML file at `multi_turn.tool_config_path`:
MCP tools go through trainctl's bridge (trainctl.runtime.mcp_bridge.MCPTool), functions through
trainctl.runtime.python_tool.PythonFunctionTool. Both write one line per call under <run>/tools/calls/, which the
tool metrics read (trainctl.runtime.tool_metrics).

The verl backend's build step sets `verl_keys` (trainctl.backends.verl); the checks (trainctl.checks.tools) list the
servers and build the document; the launcher writes it (trainctl.launch.tools).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainctl.errors import TrainctlError
from trainctl.mcp.schemas import openai_tool_schema
from trainctl.mcp.specs import allowed_tools, file_overrides, is_reference

if TYPE_CHECKING:
    from trainctl.config.schema import Tools
    from trainctl.mcp.discovery import Discovered

TOOL_AGENT = "tool_agent"  # the name verl registers ToolAgentLoop under
TOOL_CONFIG = "tools.yaml"  # in the run folder
CALLS_DIR = "tools/calls"  # in the run folder: one JSONL per process that called tools
ROLLOUTS_DIR = "rollouts"  # in the run folder: verl's rollout dumps (trainer.rollout_data_dir), one JSONL per step
SESSION_SCOPES = ("shared", "trajectory")


def enabled(tools: Tools) -> bool:
    """Whether a tools section names any tool source."""
    return bool(tools.servers or tools.servers_file or tools.functions)


def run_path(run_dir: str | Path, what: str) -> Path:
    return Path(run_dir).expanduser().resolve() / what


def verl_keys(tools: Tools, run_dir: str | Path) -> dict[str, Any]:
    """The verl keys a tools choice sets (none for tools=none: verl's defaults stay)."""
    if not enabled(tools):
        return {}
    turns = int(tools.max_assistant_turns)
    multi_turn = "actor_rollout_ref.rollout.multi_turn"
    return {
        # every row runs verl's tool agent loop (a row's agent_name column still wins)
        "actor_rollout_ref.rollout.agent.default_agent_loop": TOOL_AGENT,
        f"{multi_turn}.enable": True,
        f"{multi_turn}.format": tools.format,
        f"{multi_turn}.tool_config_path": str(run_path(run_dir, TOOL_CONFIG)),
        f"{multi_turn}.max_assistant_turns": turns,
        # tool results come back as user turns in verl's count
        f"{multi_turn}.max_user_turns": int(tools.max_tool_turns)
        if tools.max_tool_turns is not None
        else max(1, turns - 1),
        f"{multi_turn}.max_parallel_calls": int(tools.max_parallel_calls),
        f"{multi_turn}.max_tool_response_length": int(tools.max_tool_response_length),
        # every step's trajectories (messages with tool calls and results, scores) as JSONL
        "trainer.rollout_data_dir": str(run_path(run_dir, ROLLOUTS_DIR)),
    }


# -- the tool config verl reads -------------------------------------------------------------------------------------


def tool_config(
    discovered: dict[str, Discovered],
    *,
    servers_file: str | Path | None = None,
    timeout: float | None = None,
    connect_timeout: float | None = None,
    session: str = "shared",
    call_log_dir: str | Path | None = None,
    prefix_names: bool = False,
    overrides: dict[str, dict] | None = None,
) -> dict:
    """The MCP part of the document for `multi_turn.tool_config_path`: one entry per tool of every discovered server.

    With `servers_file`, each entry names its server in that file (env stays in the user's file), with the keys
    tools.servers.NAME changes (`overrides`, no values: env as ${NAME} references); without it the
    checked server entry is written inline, which is refused when an env or header value is a literal (a possible
    secret) instead of a `${VAR}` reference. Timeouts: the bridge's defaults unless given."""
    from trainctl.mcp.connection import DEFAULT_CALL_TIMEOUT, DEFAULT_CONNECT_TIMEOUT
    from trainctl.runtime.mcp_bridge import CLASS_NAME

    timeout = DEFAULT_CALL_TIMEOUT if timeout is None else timeout
    connect_timeout = DEFAULT_CONNECT_TIMEOUT if connect_timeout is None else connect_timeout

    if session not in SESSION_SCOPES:
        raise TrainctlError(f"MCP session scope {session!r} is not one of {', '.join(SESSION_SCOPES)}.")
    tools, owner = [], {}
    for name, found in discovered.items():
        spec = found.server
        where: dict[str, Any]
        if servers_file is not None:
            where = {"servers_file": str(Path(servers_file).expanduser().resolve())}
            if (overrides or {}).get(name):
                where["server_overrides"] = overrides[name]
        else:
            literal = [k for k, v in (*spec.env, *spec.headers) if not is_reference(v)]
            if literal:
                raise TrainctlError(
                    f"MCP server {name!r}: {', '.join(literal)} would be written into the run's tool config as "
                    "literal values.",
                    hint=f'write them as ${{VAR}} references (e.g. "{literal[0]}": "${{{literal[0]}}}") '
                    "or keep the server in an mcpServers file",
                )
            where = {"server_spec": spec.to_json()}
        for tool in found.tools:
            exposed = f"{name}__{tool.name}" if prefix_names else tool.name
            if exposed in owner:
                others = [t.name for t in found.tools if t.name != tool.name]
                raise TrainctlError(
                    f"MCP tool name {exposed!r} is listed by both server {owner[exposed]!r} and server {name!r}.",
                    hint="tool names must be unique across servers: leave it to one of them, e.g. "
                    f"'tools.servers.{name}.tools=[{','.join(others)}]'",
                )
            owner[exposed] = name
            config = {
                "type": "native",
                "server": name,
                **where,
                "mcp_tool": tool.name,
                "timeout": float(timeout),
                "connect_timeout": float(connect_timeout),
                "session": session,
            }
            if call_log_dir is not None:
                config["call_log_dir"] = str(call_log_dir)
            tools.append({"class_name": CLASS_NAME, "config": config, "tool_schema": openai_tool_schema(tool, exposed)})
    return {"tools": tools}


def function_entry(spec: str, schema: dict, timeout: float, call_log_dir: str | Path | None) -> dict:
    """The entry of a Python function tool (tools.functions) in the document."""
    from trainctl.runtime.python_tool import CLASS_NAME

    config: dict[str, Any] = {"type": "native", "function": spec, "timeout": float(timeout)}
    if call_log_dir is not None:
        config["call_log_dir"] = str(call_log_dir)
    return {"class_name": CLASS_NAME, "config": config, "tool_schema": schema}


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
    calls = str(run_path(run_dir, CALLS_DIR))

    def narrowed(found: dict[str, Discovered]) -> dict[str, Discovered]:
        out = {}
        for name, d in found.items():
            keep = allowed_tools(tools, name)
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
        entries += tool_config(narrowed(inline), **common)["tools"]
    if from_file:
        entries += tool_config(
            narrowed(from_file), servers_file=tools.servers_file, overrides=file_overrides(tools), **common
        )["tools"]
    for spec, schema in functions.items():
        entries.append(function_entry(spec, schema, tools.call_timeout_s, calls))
    seen: dict[str, str] = {}
    for entry in entries:
        name = entry["tool_schema"]["function"]["name"]
        source = entry["config"].get("server") or entry["config"].get("function")
        if name in seen:
            raise TrainctlError(
                f"tool name {name!r} is given by both {seen[name]!r} and {source!r}.",
                hint="tool names must be unique: " + _leave_one(entries, name),
            )
        seen[name] = source
    return {"tools": entries}


def _leave_one(entries: list[dict], name: str) -> str:
    """A runnable override that gives a duplicated tool name to one source only."""
    servers = [e["config"]["server"] for e in entries if e["config"].get("server") and _name(e) == name]
    if servers:
        server = servers[-1]
        rest = [e["config"]["mcp_tool"] for e in entries if e["config"].get("server") == server and _name(e) != name]
        return f"leave it to one of them, e.g. 'tools.servers.{server}.tools=[{','.join(rest)}]'"
    functions = [e["config"]["function"] for e in entries if "function" in e["config"] and _name(e) != name]
    first = next(e["config"]["function"] for e in entries if "function" in e["config"] and _name(e) == name)
    return f"leave it to one of them, e.g. 'tools.functions=[{','.join([first, *functions])}]'"


def _name(entry: dict) -> str:
    return entry["tool_schema"]["function"]["name"]


def write_tool_config(path: str | Path, document: dict) -> Path:
    """Write the document (atomically: a run never reads half a file)."""
    import yaml

    from trainctl.paths import atomic_write_text

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, yaml.safe_dump(document, sort_keys=False))
    return path


# -- the tool config a Ray job carries ---------------------------------------------------------------------------


def job_document(document: dict, job_python: str) -> tuple[dict, dict[str, Path]]:
    """The run's tool config as a Ray job reads it in its working dir on the cluster's nodes, and the files to
    stage beside it (name in the working dir -> file here).

    - a server of an mcpServers file is written inline (the file is not on the nodes; the plan refused literal env
      and header values for a job, so its env holds `${VAR}` references, read from the nodes' environment);
    - a stdio server started with this machine's Python starts with the job's (`job_python`), and a server file
      trainctl ships (the calculator) is staged and started from the working dir (the workers' working folder);
    - a function tool given as a file is staged, and named by its staged file.
    Run-folder paths (call logs, the calculator's log) stay as they are, as every other path of the run."""
    import copy
    import sys

    from trainctl.mcp.specs import apply_override, load_servers
    from trainctl.runtime import tools as builtin

    builtin_dir = Path(builtin.__file__).resolve().parent
    out = copy.deepcopy(document)
    staged: dict[str, Path] = {}
    for entry in out["tools"]:
        config = entry["config"]
        if config.get("servers_file"):
            spec = load_servers(config["servers_file"])[config["server"]]
            spec = apply_override(spec, dict(config.get("server_overrides") or {}), config["servers_file"])
            config.pop("servers_file")
            config.pop("server_overrides", None)
            config["server_spec"] = spec.to_json()
        server = config.get("server_spec")
        if server and server.get("command"):
            if server["command"] == sys.executable:
                server["command"] = job_python
            args = []
            for arg in server.get("args") or []:
                path = Path(arg)
                if path.is_absolute() and path.parent == builtin_dir and path.suffix == ".py":
                    staged[path.name] = path
                    arg = path.name
                args.append(arg)
            server["args"] = args
        if config.get("function"):
            from trainctl.runtime.python_tool import is_file, split_spec

            where, name = split_spec(config["function"])
            if is_file(where):
                source = Path(where).expanduser().resolve()
                staged_name = f"tool_fn_{source.stem}.py"
                staged[staged_name] = source
                config["function"] = f"{staged_name}:{name}"
    return out, staged
