"""The tools section, before anything starts.

checks  (fast, no process started): tools only with the PPO family; each server entry, inline or in an mcpServers
        file: its shape (a command for stdio, an http(s) URL for sse/http, a known transport), the environment
        variables it names or `${VAR}`-references, its working folder; the function specs; the parser format;
        budgets that fit the response length; the data rows' agent fields. Whatever can be wrong with a server
        entry is reported here: the workers of a run get checked entries (trainctl.runtime.mcp_bridge).
probes  (the native stage: starts the stdio servers, connects to the others, imports verl): every server lists its
        tools (trainctl.mcp.discovery; a server that does not start or answer is named with its stderr's last lines);
        each allowed tool name exists (did-you-mean against the real listing); each function has a schema; the
        model's chat template renders the tools and verl can append their results; the tool schemas fit the prompt.
What the probes find (listings, schemas) is kept in `s.extra["tools"]` for the launcher to write <run>/tools.yaml.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from trainctl import launchers
from trainctl.backends import tools as verl_tools
from trainctl.errors import ConfigProblems, Problem, TrainctlError
from trainctl.mcp.specs import allowed_tools, inline_transport, server_specs, spec_problems
from trainctl.suggest import closest

if TYPE_CHECKING:
    from trainctl.checks.base import Subject

# a tool call and its answer cost at least this many tokens of the response beside the result itself (the call's
# JSON, the tool-response wrapper, the next turn's header): a budget below it fits no tool round at all
MIN_ROUND_TOKENS = 16
_PARSER_REGISTRATION = re.compile(r"@ToolParser\.register\(\s*[\"']([^\"']+)[\"']")


def checks(s: Subject) -> list[Problem]:
    t = s.cfg.tools
    if not verl_tools.enabled(t):
        return []
    if s.cfg.family != "ppo":
        return [
            Problem(
                f"tools={t.name} gives the model tools during RL rollouts, but algorithm={s.cfg.algorithm.name} "
                "trains on fixed targets (no rollouts).",
                key="tools",
                hint="drop tools=..., or choose a PPO-family algorithm: algorithm=grpo",
            )
        ]
    problems = [*_servers(s), *_functions(s), *_format(s), *_budgets(s), *_data(s)]
    if launchers.get(s.cfg.hardware.launcher).ray == "inside":
        problems += _job_secrets(s)
    return problems


def _job_secrets(s: Subject) -> list[Problem]:
    """A Ray job carries its tool config to the cluster (trainctl.backends.tools.job_document): a servers file's
    env or header value written out (not a `${VAR}` reference) would go with it."""
    from trainctl.mcp.specs import is_reference

    t = s.cfg.tools
    try:
        _, from_file = server_specs(t)
    except TrainctlError:
        return []  # reported by _servers
    problems = []
    for name, spec in from_file.items():
        for what, pairs in (("env", spec.env), ("headers", spec.headers)):
            literal = [k for k, v in pairs if not is_reference(v)]
            if literal:
                problems.append(
                    Problem(
                        f"{t.servers_file}: server {name!r} gives {what} {', '.join(literal)} as values, and a Ray job "
                        "carries its tool config to the cluster: the values would go with it.",
                        key="tools.servers_file",
                        hint=f'write them as references, "{literal[0]}": "${{{literal[0]}}}", and set '
                        f"{literal[0]} in the cluster nodes' environment (trainctl doctor hardware=... checks it)",
                    )
                )
    return problems


def _servers(s: Subject) -> list[Problem]:
    t = s.cfg.tools
    problems: list[Problem] = []
    in_file: set[str] = set()
    if t.servers_file:
        try:
            _, from_file = server_specs(t)
        except ConfigProblems as e:
            problems += [_in_file(p, t.servers_file) for p in e.problems]
            in_file = _file_names(t.servers_file)
        except TrainctlError as e:
            problems.append(Problem(e.message, key="tools.servers_file", details=e.details, hint=e.hint))
        else:
            in_file = set(from_file)
            for name, spec in from_file.items():
                problems += [
                    Problem(
                        f"{t.servers_file}: server {name!r}: {found.message}.",
                        key="tools.servers_file",
                        details=[f"in mcpServers.{name}.{found.field}"],
                        hint=found.hint,
                    )
                    for found in spec_problems(spec)
                    # env names added by tools.servers.NAME.env are reported there
                    if found.field.removeprefix("env.") not in (t.servers[name].env if name in t.servers else ())
                ]
    for name, server in t.servers.items():
        key = f"tools.servers.{name}"
        # a servers file's server with keys changed here: the merged entry was checked with the file's
        if name not in in_file:
            problems += _inline_server(key, server, sorted(in_file) if t.servers_file else None)
        for var in server.env:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", var):
                shown = var.split("=", 1)[0] + "=***" if "=" in var else var  # NAME=value: never echo the value
                problems.append(
                    Problem(
                        f"{key}.env lists {shown!r}, which is not an environment variable name; env holds NAMES only "
                        "(values are read from your environment and never saved).",
                        key=f"{key}.env",
                        hint=f"export MY_TOKEN=... and set {key}.env=[MY_TOKEN]",
                    )
                )
            elif var not in os.environ:
                problems.append(
                    Problem(
                        f"{key}.env names {var}, which is not set in this environment: the server would start "
                        "without it.",
                        key=f"{key}.env",
                        hint=f"export {var}=... before trainctl train",
                    )
                )
    return problems


def _file_names(path: str) -> set[str]:
    """The server names of an mcpServers file that may not parse as a whole (for telling overrides apart)."""
    import json

    try:
        data = json.loads(Path(path).expanduser().read_text(encoding="utf-8"))
        return set(data["mcpServers"])
    except (OSError, ValueError, KeyError, TypeError):
        return set()


def _inline_server(key: str, server, file_names: list[str] | None) -> list[Problem]:
    """A server tools.servers defines by itself (no servers file names it)."""
    problems = []
    transport = inline_transport(server)
    if transport == "stdio" and not server.command:
        details = []
        if file_names is not None:
            name = key.rsplit(".", 1)[-1]
            guess = closest(name, file_names)
            details.append(
                f"tools.servers_file names {', '.join(map(repr, file_names)) or 'no server'}"
                + (f": did you mean {guess[0]!r}?" if guess else f", not {name!r}")
            )
        problems.append(
            Problem(
                f"{key} is a stdio server with no command to start it.",
                key=f"{key}.command",
                details=details,
                hint=f"{key}.command=python '{key}.args=[server.py]', or {key}.transport=sse {key}.url=http://...",
            )
        )
    if transport != "stdio" and not re.match(r"^https?://", server.url or ""):
        problems.append(
            Problem(
                f"{key} is a {server.transport} server without an http(s) url (url = {server.url!r}).",
                key=f"{key}.url",
                hint=f"{key}.url=http://127.0.0.1:8001/{'sse' if transport == 'sse' else 'mcp'}",
            )
        )
    if transport != "stdio" and (server.command or server.args):
        problems.append(
            Problem(
                f"{key} has a command, but transport={server.transport} servers are reached at their url, "
                "not started by the run.",
                key=f"{key}.transport",
                hint=f"{key}.transport=stdio, or drop {key}.command",
            )
        )
    if transport == "stdio" and server.cwd and not Path(server.cwd).expanduser().is_dir():
        problems.append(
            Problem(
                f"{key}.cwd = {server.cwd!r} is not a folder: the server could not be started in it.",
                key=f"{key}.cwd",
                hint=f"give an existing folder, or {key}.cwd=null (the run's folder)",
            )
        )
    return problems


def _in_file(p: Problem, file: str) -> Problem:
    # the parser's messages start with the file already ("mcp.json: server 'x' ...")
    message = p.message if p.message.startswith(str(Path(file).expanduser())) else f"{file}: {p.message}"
    return Problem(message, key="tools.servers_file", details=p.details, hint=p.hint)


def _functions(s: Subject) -> list[Problem]:
    from trainctl.runtime.python_tool import is_file, split_spec

    problems = []
    for i, spec in enumerate(s.cfg.tools.functions):
        try:
            where, _ = split_spec(spec)
        except TrainctlError as e:
            problems.append(Problem(e.message, key=f"tools.functions[{i}]", hint=e.hint))
            continue
        if is_file(where) and not Path(where).expanduser().is_file():
            problems.append(
                Problem(
                    f"tools.functions[{i}] = {spec!r}: {where} does not exist.",
                    key="tools.functions",
                    hint=f"give the path from {Path.cwd()}, or an absolute one",
                )
            )
    return problems


def parser_names() -> list[str]:
    """verl's registered tool-call parsers, read from its source (no import)."""
    import importlib.util

    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        return []
    source = Path(next(iter(spec.submodule_search_locations))) / "experimental" / "agent_loop" / "tool_parser.py"
    try:
        return sorted(set(_PARSER_REGISTRATION.findall(source.read_text())))
    except OSError:
        return []


def _format(s: Subject) -> list[Problem]:
    fmt = s.cfg.tools.format
    names = parser_names()
    if not names or fmt in names:
        return []
    guess = closest(fmt, names)
    return [
        Problem(
            f"tools.format = {fmt!r} is not a tool-call parser verl knows ({', '.join(names)}).",
            key="tools.format",
            details=[f"Did you mean {guess[0]!r}?"] if guess else [],
            hint=f"tools.format={guess[0] if guess else 'hermes'}",
        )
    ]


def _budgets(s: Subject) -> list[Problem]:
    t = s.cfg.tools
    length = s.value("actor_rollout_ref.rollout.response_length") or s.cfg.data.max_response_length
    key = "data.max_response_length"
    problems = []
    rounds = s.value("actor_rollout_ref.rollout.multi_turn.max_user_turns") or 0
    if rounds and length < MIN_ROUND_TOKENS * 2:
        problems.append(
            Problem(
                f"{key} = {length} tokens leaves no room for a tool round: a call, its result and the answer take at "
                f"least ~{MIN_ROUND_TOKENS * 2} tokens.",
                key=key,
                hint=f"{key}={MIN_ROUND_TOKENS * 8}",
            )
        )
        return problems
    # verl cuts each tool result to max_tool_response_length characters; a character is at least one token's worth
    # only for rare scripts, so characters bound tokens from above for most text
    per_round = t.max_parallel_calls * t.max_tool_response_length
    if per_round + MIN_ROUND_TOKENS > length:
        fit = max(1, (length // 2) // t.max_parallel_calls)
        problems.append(
            Problem(
                f"one tool round can fill the whole response: tools.max_parallel_calls x "
                f"tools.max_tool_response_length = {t.max_parallel_calls} x {t.max_tool_response_length} = "
                f"{per_round} characters of results, plus ~{MIN_ROUND_TOKENS} tokens for the call, against "
                f"{key} = {length} tokens; the model would have nothing left to answer with.",
                key="tools.max_tool_response_length",
                hint=f"tools.max_tool_response_length={fit}, or {key}={per_round + 4 * MIN_ROUND_TOKENS}",
            )
        )
    return problems


def _data(s: Subject) -> list[Problem]:
    """Rows that would not run through the tool loop, or that ask for tools this run does not have."""
    import pyarrow.parquet as pq

    problems = []
    for split_key in ("train_files", "val_files"):
        f = getattr(s.cfg.data, split_key)
        if not f or Path(f).suffix != ".parquet" or not Path(f).expanduser().is_file():
            continue
        path = Path(f).expanduser()
        try:
            schema = pq.read_schema(path)
            names = set(schema.names)
            agents = pq.read_table(path, columns=["agent_name"]) if "agent_name" in names else None
            # tool_selection: the first rows tell (a whole extra_info column can be large)
            first = next(pq.ParquetFile(path).iter_batches(2048, columns=["extra_info"]), None)
            infos = first.column(0).to_pylist() if first is not None and "extra_info" in names else []
        except Exception:  # unreadable files are reported by the data checks
            continue
        if agents is not None:
            named = sorted({str(a) for a in agents.column("agent_name").to_pylist() if a is not None})
            other = [a for a in named if a != verl_tools.TOOL_AGENT]
            if other:
                problems.append(
                    Problem(
                        f"{path} has rows with agent_name = {', '.join(map(repr, other))}: verl runs them through that "
                        f"loop, which never calls tools (tools={s.cfg.tools.name} needs {verl_tools.TOOL_AGENT!r}).",
                        key=f"data.{split_key}",
                        hint="drop the agent_name column (trainctl then runs every row through tool_agent), or "
                        f"write {verl_tools.TOOL_AGENT!r} in it",
                    )
                )
        if infos:
            wanted = set()
            for info in infos:
                if isinstance(info, dict) and info.get("tool_selection"):
                    wanted.update(str(x) for x in info["tool_selection"])
            if wanted:
                s.extra.setdefault("tool_selection", {})[str(path)] = sorted(wanted)
    return problems


# -- probes (the native stage) ------------------------------------------------------------------------------------


def probes(s: Subject) -> list[Problem]:
    from trainctl.silence import library_logs

    with library_logs():  # the tokenizer's and the MCP SDK's own warnings go to the debug log
        return _probes(s)


def _probes(s: Subject) -> list[Problem]:
    t = s.cfg.tools
    if not verl_tools.enabled(t) or s.cfg.family != "ppo":
        return []
    problems: list[Problem] = []
    try:
        inline_specs, file_specs = server_specs(t)
    except (TrainctlError, ConfigProblems):
        return []  # reported by the checks
    inline = _discover(inline_specs, t, problems, "tools.servers")
    from_file = _discover(file_specs, t, problems, "tools.servers_file")
    schemas: list[dict] = []
    for name, d in {**inline, **from_file}.items():
        listed = [tool.name for tool in d.tools]
        keep = allowed_tools(t, name)
        for wanted in keep or []:
            if wanted not in listed:
                guess = closest(wanted, listed)
                problems.append(
                    Problem(
                        f"tools.servers.{name}.tools names {wanted!r}, which MCP server {name!r} does not list "
                        f"(it lists: {', '.join(listed) or 'nothing'}).",
                        key=f"tools.servers.{name}.tools",
                        details=[f"Did you mean {guess[0]!r}?"] if guess else [],
                        hint=f"tools.servers.{name}.tools=[{guess[0] if guess else ','.join(listed)}]",
                    )
                )
    functions: dict[str, dict] = {}
    for spec in t.functions:
        from trainctl.runtime.python_tool import function_schema, load_function

        try:
            functions[spec] = function_schema(load_function(spec), spec)
        except TrainctlError as e:
            problems.append(Problem(e.message, key="tools.functions", hint=e.hint))
    if problems:
        return problems
    try:
        document = verl_tools.tool_config_document(t, inline, from_file, functions, s.cfg.run.dir)
    except TrainctlError as e:
        return [Problem(e.message, key="tools", hint=e.hint)]
    schemas = [entry["tool_schema"] for entry in document["tools"]]
    if not schemas:
        listed = {name: [tool.name for tool in d.tools] for name, d in {**inline, **from_file}.items() if d.tools}
        allow = [f"'tools.servers.{name}.tools=[{','.join(tools)}]'" for name, tools in listed.items()]
        return [
            Problem(
                f"tools={t.name} leaves the model no tool: the servers list none that are allowed.",
                key="tools",
                details=[f"MCP server {name!r} lists: {', '.join(tools)}" for name, tools in listed.items()],
                hint=(" ".join(allow) if allow else "give a server that lists tools") + ", or tools=none",
            )
        ]
    names = {sch["function"]["name"] for sch in schemas}
    for path, wanted in s.extra.get("tool_selection", {}).items():
        missing = sorted(set(wanted) - names)
        if missing:
            problems.append(
                Problem(
                    f"{path}: rows select the tool{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                    f"(extra_info.tool_selection), which tools={t.name} does not give (it gives: "
                    f"{', '.join(sorted(names))}).",
                    key="data.train_files",
                    hint="add the server or function that provides them, or prepare the data for these tools",
                )
            )
    s.extra["tools"] = {"document": document, "servers": {**inline, **from_file}, "functions": functions}
    problems += _model(s, schemas)
    return problems


def _discover(specs: dict, t, problems: list[Problem], where: str) -> dict:
    from trainctl.mcp.discovery import discover

    if not specs:
        return {}
    try:
        return discover(specs, timeout=t.connect_timeout_s, cached=True)
    except ConfigProblems as e:
        for p in e.problems:
            name = (p.key or "").split(".", 1)[-1]
            key = f"tools.servers.{name}" if where == "tools.servers" else where
            problems.append(Problem(p.message, key=key, details=p.details, hint=p.hint))
        return {}


def _model(s: Subject, schemas: list[dict]) -> list[Problem]:
    """The model's chat template against the tools (when the model is on disk), and the schemas' share of the
    prompt budget."""
    import json

    folder = Path(s.cfg.model.path).expanduser()
    if not (folder / "config.json").is_file():
        return []  # the files checks say the model is missing
    from transformers import AutoTokenizer

    from trainctl.models.tool_template import tool_template_problems

    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model_type = json.loads((folder / "config.json").read_text()).get("model_type")
    except Exception as e:
        return [Problem(f"the tokenizer in {folder} cannot be loaded: {e}", key="model.path")]
    found = tool_template_problems(tokenizer, schemas, model_type)
    if found:
        return [
            Problem(
                f"model={s.cfg.model.name}: {reason}; the model cannot be shown tools={s.cfg.tools.name}.",
                key="model",
                details=[f"model folder: {folder}"],
                hint="choose a model whose chat template renders tools (Qwen2.5/Qwen3 instruct: model=qwen2.5-7b), "
                "or add such a template to its tokenizer_config.json",
            )
            for reason in found
        ]
    from trainctl.models.tool_template import schema_tokens

    overhead, limit = schema_tokens(tokenizer, schemas), s.cfg.data.max_prompt_length
    if overhead >= limit:
        from trainctl.toolenv.servers import narrowing

        offered = [
            (e["config"].get("server"), e["config"].get("mcp_tool") or e["config"]["function"], e["tool_schema"])
            for e in s.extra["tools"]["document"]["tools"]
        ]
        narrower = narrowing(offered, lambda some: schema_tokens(tokenizer, some), limit // 2)
        return [
            Problem(
                f"the tool schemas take {overhead} tokens of every prompt, and data.max_prompt_length = {limit} "
                "leaves no room for the question.",
                key="data.max_prompt_length",
                hint=f"data.max_prompt_length={_round_up(overhead + limit)}"
                + (f", or allow fewer tools: {narrower}" if narrower else ""),
            )
        ]
    s.extra["tool_prompt_tokens"] = overhead
    return []


def numbers(s: Subject):
    """The plan's figures for the tools: how many, and their share of each prompt."""
    from trainctl.checks.base import Number

    found = s.extra.get("tools")
    if not found:
        return []
    names = [e["tool_schema"]["function"]["name"] for e in found["document"]["tools"]]
    out = [Number("tools the model may call", len(names), ", ".join(names))]
    if "tool_prompt_tokens" in s.extra:
        out.append(
            Number(
                "tool schema tokens per prompt",
                s.extra["tool_prompt_tokens"],
                f"of data.max_prompt_length {s.cfg.data.max_prompt_length}",
            )
        )
    return out


def _round_up(n: int, to: int = 64) -> int:
    return -(-n // to) * to
