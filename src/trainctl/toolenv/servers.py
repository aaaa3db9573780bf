"""The servers of a tools config, started or reached as a run does it (`trainctl tools ls` and `tools call`).

`list_tools(cfg)` connects to every server of cfg.tools at once (the servers file's entries with their tools.servers
overrides applied), lists its tools with the schema verl renders into prompts and the prompt tokens each costs the
chosen model, and reads tools.functions' schemas. `call(cfg, "SERVER.TOOL", arguments)` starts or reaches one
server, checks the tool against its listing (a did-you-mean for a name it does not list), calls it once and returns
what the model would read: the text MCPTool gives verl, cut as verl cuts it (max_tool_response_length).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainctl.errors import Problem, TrainctlError
from trainctl.mcp.discovery import Answer, discover_each, probe
from trainctl.mcp.results import as_verl_cuts, error_text
from trainctl.mcp.schemas import openai_tool_schema
from trainctl.mcp.specs import ServerSpec, allowed_tools, server_specs
from trainctl.suggest import closest

FUNCTIONS = "functions"  # how `tools ls` heads tools.functions (a function is called by its name alone)
# how verl cuts a long tool result by default (multi_turn.tool_response_truncate_side)
TRUNCATE_SIDE = "middle"


@dataclass
class ToolEntry:
    name: str  # as the model sees it
    description: str
    parameters: dict  # the schema's parameters, as verl renders them into prompts
    allowed: bool  # the run gives it to the model (tools.servers.NAME.tools)
    tokens: int | None = None  # prompt tokens its schema costs, alone
    function: str | None = None  # a function tool's spec (path/to/file.py:function)

    @property
    def schema(self) -> dict:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


@dataclass
class ServerEntry:
    name: str
    source: str  # tools.servers, the servers file, or tools.functions
    where: str  # the command line or URL (secrets masked)
    info: dict | None = None  # name and version from MCP's initialize
    seconds: float | None = None  # to start or reach it and list its tools
    tools: list[ToolEntry] = field(default_factory=list)
    problem: Problem | None = None  # why it could not be started or reached


@dataclass
class Listing:
    servers: list[ServerEntry]
    model: str
    tokens: int | None  # prompt tokens all allowed schemas cost together (None: no tokenizer)
    max_prompt_length: int
    note: str | None = None  # why there are no token counts
    tokenizer: Any = field(default=None, repr=False)

    @property
    def problems(self) -> list[Problem]:
        return [s.problem for s in self.servers if s.problem is not None]

    def to_json(self) -> dict:
        return {
            "model": self.model,
            "schema_tokens": self.tokens,
            "max_prompt_length": self.max_prompt_length,
            "servers": [
                {
                    "name": s.name,
                    "source": s.source,
                    "where": s.where,
                    "server_info": s.info,
                    "seconds": None if s.seconds is None else round(s.seconds, 3),
                    "error": s.problem.message if s.problem else None,
                    "tools": [
                        {"name": t.name, "allowed": t.allowed, "tokens": t.tokens, "schema": t.schema} for t in s.tools
                    ],
                }
                for s in self.servers
            ],
        }


def specs(tools: Any) -> dict[str, tuple[ServerSpec, str]]:
    """Every MCP server of a tools section by name, with where it was defined."""
    inline, from_file = server_specs(tools)
    out = {name: (spec, "tools.servers") for name, spec in inline.items()}
    out.update({name: (spec, str(tools.servers_file)) for name, spec in from_file.items()})
    return out


def list_tools(cfg: Any) -> Listing:
    """Every server and function of cfg.tools: started or reached at once, their tools listed. A server that
    cannot be started or reached is in the listing with its Problem; the others are listed all the same."""
    tools = cfg.tools
    servers = specs(tools)
    found, problems = discover_each({n: s for n, (s, _) in servers.items()}, timeout=tools.connect_timeout_s)
    failed = {p.key.split(".", 1)[-1]: p for p in problems if p.key}
    entries = []
    for name, (spec, source) in servers.items():
        entry = ServerEntry(name, source, spec.describe())
        if name in found:
            d = found[name]
            keep = allowed_tools(tools, name)
            entry.info, entry.seconds = d.server_info, d.seconds
            for tool in d.tools:
                schema = openai_tool_schema(tool)["function"]
                entry.tools.append(
                    ToolEntry(
                        schema["name"], schema["description"], schema["parameters"], keep is None or tool.name in keep
                    )
                )
        else:
            entry.problem = failed.get(name) or Problem(f"MCP server {name!r} could not be listed.")
        entries.append(entry)
    if tools.functions:
        entries.append(_functions(tools.functions))
    listing = Listing(entries, cfg.model.name, None, cfg.data.max_prompt_length)
    _count_tokens(listing, cfg.model.path)
    return listing


def _functions(functions: list[str]) -> ServerEntry:
    from trainctl.runtime.python_tool import function_schema, load_function

    entry = ServerEntry(FUNCTIONS, "tools.functions", "Python functions in this process")
    start = time.perf_counter()
    problems = []
    for spec in functions:
        try:
            schema = function_schema(load_function(spec), spec)["function"]
        except TrainctlError as e:
            problems.append(e.message)
            continue
        entry.tools.append(ToolEntry(schema["name"], schema["description"], schema["parameters"], True, None, spec))
    entry.seconds = time.perf_counter() - start
    if problems:
        entry.problem = Problem("; ".join(problems), key="tools.functions")
    return entry


def load_tokenizer(model_path: str) -> tuple[Any, str | None]:
    """The model's tokenizer, or None and why (a model that is not on disk)."""
    folder = Path(model_path).expanduser()
    if not (folder / "config.json").is_file() and not (folder / "tokenizer_config.json").is_file():
        return None, f"the model is not in {folder}: no token counts"
    from transformers import AutoTokenizer

    from trainctl.silence import library_logs

    try:
        with library_logs():
            return AutoTokenizer.from_pretrained(folder), None
    except Exception as e:
        return None, f"the tokenizer in {folder} cannot be loaded ({type(e).__name__}: {e}): no token counts"


def _count_tokens(listing: Listing, model_path: str) -> None:
    from trainctl.models.tool_template import schema_tokens
    from trainctl.silence import library_logs

    tokenizer, listing.note = load_tokenizer(model_path)
    if tokenizer is None:
        return
    listing.tokenizer = tokenizer
    if not getattr(tokenizer, "chat_template", None):
        listing.note = "the model's tokenizer has no chat template: no token counts"
        return
    with library_logs():  # a long schema list is "longer than the model's maximum": said in the debug log
        try:
            for server in listing.servers:
                for tool in server.tools:
                    tool.tokens = schema_tokens(tokenizer, [tool.schema])
            allowed = [t.schema for s in listing.servers for t in s.tools if t.allowed]
            listing.tokens = schema_tokens(tokenizer, allowed) if allowed else 0
        except Exception as e:  # a template that cannot render tools: `config validate` says why
            listing.note = f"the chat template cannot render the tools ({type(e).__name__}: {e}): no token counts"


def narrowing(
    offered: list[tuple[str | None, str, dict]], cost: Callable[[list[dict]], int], budget: int
) -> str | None:
    """Overrides that keep the tools on offer, in their order, while their schemas cost at most `budget` prompt
    tokens. `offered`: (MCP server, its tool, schema), or (None, function spec, schema) for a function tool. Gives
    `'tools.servers.NAME.tools=[a,b]'` for each server that loses tools, `'tools.functions=[...]'` for functions;
    None when not even the first tool fits."""
    kept: list[int] = []
    for i, (_, _, schema) in enumerate(offered):
        if cost([offered[k][2] for k in kept] + [schema]) > budget:
            break
        kept.append(i)
    if not kept:
        return None
    out = []
    servers: dict[str, tuple[list[str], list[str]]] = {}
    functions: tuple[list[str], list[str]] = ([], [])
    for i, (server, name, _) in enumerate(offered):
        every, keep = servers.setdefault(server, ([], [])) if server is not None else functions
        every.append(name)
        if i in kept:
            keep.append(name)
    for server, (every, keep) in servers.items():
        if keep != every:
            out.append(f"'tools.servers.{server}.tools=[{','.join(keep)}]'")
    if functions[0] != functions[1]:
        out.append(f"'tools.functions=[{','.join(functions[1])}]'")
    return " ".join(out) or None


def fit_hint(listing: Listing) -> str | None:
    """When the allowed schemas do not fit data.max_prompt_length: the overrides that keep the tools that fit in
    half of it (the other half is the question's)."""
    if listing.tokens is None or listing.tokens < listing.max_prompt_length or listing.tokenizer is None:
        return None
    from trainctl.models.tool_template import schema_tokens

    offered = [
        (None if s.name == FUNCTIONS else s.name, t.function or t.name, t.schema)
        for s in listing.servers
        for t in s.tools
        if t.allowed
    ]
    return narrowing(offered, lambda some: schema_tokens(listing.tokenizer, some), listing.max_prompt_length // 2)


# -- one call ----------------------------------------------------------------------------------------------------


@dataclass
class CallReport:
    server: str
    tool: str
    arguments: Any
    text: str  # what the model reads: the answer (or its error text), cut at max_tool_response_length
    chars: int  # the answer's length before that cut
    is_error: bool  # the server answered with an error (or no answer came)
    answered: bool  # False: no answer came back (a timeout, the server went away)
    seconds: float  # the call itself
    connect_seconds: float  # starting or reaching the server and listing its tools
    allowed: bool  # a run gives this tool to the model
    limit: int  # tools.max_tool_response_length

    def to_json(self) -> dict:
        return {
            "server": self.server,
            "tool": self.tool,
            "arguments": self.arguments,
            "text": self.text,
            "chars": self.chars,
            "truncated": self.chars > self.limit,
            "error": self.is_error,
            "answered": self.answered,
            "seconds": round(self.seconds, 4),
            "connect_seconds": round(self.connect_seconds, 3),
            "allowed": self.allowed,
        }


def split_target(target: str) -> tuple[str | None, str]:
    """(server, tool) of SERVER.TOOL; (None, name) for a function tool named alone."""
    server, dot, tool = target.partition(".")
    if not dot:
        return None, target
    if not server or not tool:
        raise TrainctlError(f"{target!r} is not SERVER.TOOL.", hint="e.g. trainctl tools call calculator.calculator")
    return server, tool


def call(cfg: Any, target: str, arguments: Any, timeout: float | None = None) -> CallReport:
    """Call one tool of cfg.tools once, as a run's worker would (timeout: tools.call_timeout_s unless given).

    Raises TrainctlError for an unknown server or tool (with a did-you-mean), ConfigProblems for a server that
    cannot be started or reached."""
    tools = cfg.tools
    timeout = float(timeout or tools.call_timeout_s)
    server, tool = split_target(target)
    if server is None:
        return _call_function(cfg, tool, arguments, timeout)
    servers = specs(tools)
    if server not in servers:
        names = sorted(servers)
        guess = closest(server, names)
        raise TrainctlError(
            f"no MCP server {server!r} in tools={tools.name}"
            + (f" (its servers: {', '.join(names)})." if names else " (it has no MCP servers)."),
            details=[f"Did you mean {guess[0]!r}?"] if guess else [],
            hint=f"trainctl tools call {guess[0]}.{tool} ..." if guess else "trainctl tools ls shows the servers",
        )
    spec = servers[server][0]

    def choose(listed: list) -> list[tuple[str, Any]]:
        names = [t.name for t in listed]
        if tool not in names:
            guess = closest(tool, names)
            raise TrainctlError(
                f"MCP server {server!r} lists no tool {tool!r} (it lists: {', '.join(names) or 'nothing'}).",
                details=[f"Did you mean {guess[0]!r}?"] if guess else [],
                hint=f"trainctl tools call {server}.{guess[0] if guess else names[0] if names else tool} ...",
            )
        return [(tool, arguments)]

    found, (answer,) = probe(spec, choose, timeout=tools.connect_timeout_s, call_timeout=timeout)
    keep = allowed_tools(tools, server)
    return _report(server, answer, found.seconds, keep is None or tool in keep, tools.max_tool_response_length)


def _report(server: str, answer: Answer, connect: float, allowed: bool, limit: int) -> CallReport:
    return CallReport(
        server=server,
        tool=answer.tool,
        arguments=answer.arguments,
        text=as_verl_cuts(answer.text, limit, TRUNCATE_SIDE),
        chars=len(answer.text),
        is_error=answer.is_error,
        answered=answer.answered,
        seconds=answer.seconds,
        connect_seconds=connect,
        allowed=allowed,
        limit=limit,
    )


def _call_function(cfg: Any, name: str, arguments: Any, timeout: float) -> CallReport:
    import asyncio

    from trainctl.runtime.python_tool import call_function, function_schema, load_function

    tools = cfg.tools
    start = time.perf_counter()
    found = {}
    for spec in tools.functions:
        fn = load_function(spec)
        found[function_schema(fn, spec)["function"]["name"]] = fn
    if name not in found:
        names = sorted(found)
        guess = closest(name, names)
        raise TrainctlError(
            f"no function tool {name!r} in tools={tools.name}"
            + (f" (its functions: {', '.join(names)})." if names else " (it has no tools.functions)."),
            details=[f"Did you mean {guess[0]!r}?"] if guess else [],
            hint="an MCP server's tool is SERVER.TOOL: trainctl tools ls shows them",
        )
    loaded = time.perf_counter() - start
    begin = time.perf_counter()
    text, is_error = asyncio.run(call_function(found[name], arguments, timeout))
    seconds = time.perf_counter() - begin
    answered = not (is_error and text.startswith(error_text(f"the call to {found[name].__name__!r} timed out")))
    answer = Answer(name, arguments, text, is_error, answered, seconds)
    return _report(FUNCTIONS, answer, loaded, True, tools.max_tool_response_length)


def parse_arguments(text: str) -> dict:
    """--args: a JSON object."""
    try:
        value = json.loads(text)
    except ValueError as e:
        raise TrainctlError(
            f"--args is not JSON: {e.msg} at column {e.colno}.",
            hint="""quote it for the shell: --args '{"expression": "6 * 7"}'""",
        ) from None
    if not isinstance(value, dict):
        raise TrainctlError(
            f"--args must be a JSON object (the tool's arguments by name), not {type(value).__name__}.",
            hint="""e.g. --args '{"expression": "6 * 7"}'""",
        )
    return value
