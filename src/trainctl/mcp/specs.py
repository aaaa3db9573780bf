"""MCP servers as named in the standard `mcpServers` file (Claude Desktop, MCP Inspector) or in tools.servers.

    {"mcpServers": {NAME: {"command", "args", "env", "cwd"} | {"type": "sse" | "streamable-http", "url", "headers"}}}

stdio servers are started by whoever connects (plan-time discovery, then each worker process of a run) and stopped
with the connection; sse / streamable-http servers are reached at their URL.

Every mistake an entry can hold is found at plan time: its shape by `parse_server` (raising TrainctlError), what
depends on this machine (a `${VAR}` that is not set, a `cwd` that does not exist) by `spec_problems`. A worker
gets the checked entry back with `ServerSpec.from_json` and never validates.

Secrets: `env` and `headers` values may be `${VAR}` references, expanded from the environment only when a server
starts; values are never printed (reprs, descriptions and errors leave them out).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainctl.errors import ConfigProblems, Problem, TrainctlError

TRANSPORTS = ("stdio", "sse", "streamable-http")
# "http" is what some clients (VS Code, Cursor) call streamable HTTP; tools.servers.NAME.transport says http too
_TRANSPORT_ALIASES = {
    "http": "streamable-http",
    "streamablehttp": "streamable-http",
    "streamable_http": "streamable-http",
}
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SECRET_OPTION = re.compile(r"(token|secret|password|passwd|api[-_]?key|credential)", re.I)


class UnsetVariable(Exception):
    """A `${VAR}` reference to a variable this process's environment lacks (found at plan time by `spec_problems`;
    a worker that meets it reports a tool error, see trainctl.runtime.mcp_bridge)."""

    def __init__(self, what: str, var: str):
        super().__init__(f"{what} refers to ${{{var}}}, which is not set in the environment")
        self.what, self.var = what, var


@dataclass(frozen=True)
class ServerSpec:
    """One MCP server: how to start it (stdio) or where it answers (sse / streamable-http).

    env and headers may hold secrets: they are left out of repr() and describe()."""

    name: str
    transport: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    cwd: str | None = None
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def describe(self) -> str:
        """What a person needs to recognise the server: the command line or the URL (credentials removed)."""
        if self.transport == "stdio":
            return f"stdio: {self.command_line()}"
        return f"{self.transport}: {strip_userinfo(self.url or '')}"

    def command_line(self) -> str:
        """The stdio command, with the values of secret-looking options (--api-key X, --token=X) masked."""
        words, hide = [self.command or ""], False
        for arg in self.args:
            flag, eq, _ = arg.partition("=")
            if hide:
                words.append("***")
            elif eq and flag.startswith("-") and _SECRET_OPTION.search(flag):
                words.append(f"{flag}=***")
            else:
                words.append(arg)
            hide = not eq and arg.startswith("-") and bool(_SECRET_OPTION.search(arg))
        return " ".join(words)

    def to_json(self) -> dict:
        """The mcpServers entry, as given (env and headers included: `${VAR}` references, or for files the user
        owns)."""
        if self.transport == "stdio":
            out: dict[str, Any] = {"command": self.command, "args": list(self.args)}
            if self.env:
                out["env"] = dict(self.env)
            if self.cwd:
                out["cwd"] = self.cwd
            return out
        out = {"type": self.transport, "url": self.url}
        if self.headers:
            out["headers"] = dict(self.headers)
        return out

    @classmethod
    def from_json(cls, name: str, entry: dict) -> ServerSpec:
        """An entry `to_json` wrote from a checked spec (the run's tools.yaml), taken as it is: nothing is
        validated again (a worker has no one to report a config problem to)."""
        if "command" in entry:
            return cls(
                name,
                "stdio",
                command=entry["command"],
                args=tuple(entry.get("args") or ()),
                env=tuple((entry.get("env") or {}).items()),
                cwd=entry.get("cwd"),
            )
        return cls(name, entry["type"], url=entry["url"], headers=tuple((entry.get("headers") or {}).items()))

    def expanded_env(self) -> dict[str, str]:
        """env with its `${VAR}` references expanded; raises UnsetVariable."""
        return {k: expand(v, f"env {k}") for k, v in self.env}

    def expanded_headers(self) -> dict[str, str]:
        """headers with their `${VAR}` references expanded; raises UnsetVariable."""
        return {k: expand(v, f"header {k}") for k, v in self.headers}

    def secret_values(self) -> list[str]:
        """Expanded env and header values (to scrub from anything the server writes back)."""
        values = []
        for what, v in (*self.env, *self.headers):
            with contextlib.suppress(UnsetVariable):
                values.append(expand(v, what))
        return [v for v in values if len(v) >= 4]


def strip_userinfo(url: str) -> str:
    """A URL without the user:password@ part."""
    return re.sub(r"(//)[^/@]*@", r"\1", url)


def expand(value: str, what: str) -> str:
    """`value` with each `${VAR}` replaced from the environment; raises UnsetVariable naming `what`."""

    def var(m: re.Match) -> str:
        if m.group(1) not in os.environ:
            raise UnsetVariable(what, m.group(1))
        return os.environ[m.group(1)]

    return _VAR.sub(var, value)


def is_reference(value: str) -> bool:
    """A value that is only `${VAR}` references (safe to write into a saved config)."""
    return bool(_VAR.search(value)) and not _VAR.sub("", value).strip()


# -- parsing: the shape of an entry --------------------------------------------------------------------------------


def parse_servers(data: Any, source: str = "mcpServers") -> dict[str, ServerSpec]:
    """The servers of an `mcpServers` document (already parsed), every problem reported at once."""
    if not isinstance(data, dict) or not isinstance(data.get("mcpServers"), dict):
        found = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise TrainctlError(
            f'{source}: expected an object with an "mcpServers" object inside, found {found}.',
            hint='write it as {"mcpServers": {"calc": {"command": "python", "args": ["server.py"]}}}',
        )
    servers: dict[str, ServerSpec] = {}
    problems: list[Problem] = []
    for name, entry in data["mcpServers"].items():
        try:
            servers[name] = parse_server(name, entry, source)
        except TrainctlError as e:
            problems.append(Problem(e.message, key=f"mcpServers.{name}", hint=e.hint))
    if problems:
        raise ConfigProblems(problems)
    if not servers:
        raise TrainctlError(f'{source}: "mcpServers" is empty.', hint="name at least one server")
    return servers


def parse_server(name: str, entry: Any, source: str = "mcpServers") -> ServerSpec:
    """One mcpServers entry; raises TrainctlError naming the server and what is wrong with it."""
    where = f"{source}: server {name!r}"
    if not isinstance(entry, dict):
        raise TrainctlError(f"{where} must be an object, not {type(entry).__name__}.")
    kind = str(entry.get("type") or entry.get("transport") or "").lower()
    kind = _TRANSPORT_ALIASES.get(kind, kind)
    if "command" in entry or kind == "stdio":
        command = entry.get("command")
        if not isinstance(command, str) or not command:
            raise TrainctlError(f'{where} has no "command" to start it with.', hint='e.g. "command": "npx"')
        args = entry.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str | int | float) for a in args):
            raise TrainctlError(f'{where}: "args" must be a list of strings.')
        env = _str_mapping(entry.get("env"), f'{where}: "env"')
        cwd = entry.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise TrainctlError(f'{where}: "cwd" must be a folder path, not {type(cwd).__name__}.')
        return ServerSpec(name, "stdio", command=command, args=tuple(str(a) for a in args), env=env, cwd=cwd)
    url = entry.get("url")
    if not isinstance(url, str) or not re.match(r"^https?://", url):
        raise TrainctlError(
            f'{where} has neither a "command" (stdio) nor an http(s) "url" (sse / streamable-http).',
            hint='e.g. {"type": "sse", "url": "http://127.0.0.1:8001/sse"}',
        )
    if not kind:
        kind = "sse" if url.rstrip("/").endswith("/sse") else "streamable-http"
    if kind not in TRANSPORTS:
        raise TrainctlError(f'{where}: unknown "type" {entry.get("type")!r}.', hint=f"one of {', '.join(TRANSPORTS)}")
    headers = _str_mapping(entry.get("headers"), f'{where}: "headers"')
    return ServerSpec(name, kind, url=url, headers=headers)


def _str_mapping(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict) or not all(isinstance(v, str | int | float | bool) for v in value.values()):
        raise TrainctlError(f"{where} must map names to strings.")
    return tuple((str(k), str(v)) for k, v in value.items())


def load_servers(path: str | Path) -> dict[str, ServerSpec]:
    """The servers of an `mcpServers` JSON file; a file that is not valid JSON is reported with its line."""
    path = Path(path).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TrainctlError(f"MCP servers file {path} does not exist.") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        line = text.splitlines()[e.lineno - 1] if 0 < e.lineno <= len(text.splitlines()) else ""
        raise TrainctlError(
            f"MCP servers file {path} is not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}.",
            details=[f"  {e.lineno} | {line}", f"  {' ' * len(str(e.lineno))} | {' ' * (e.colno - 1)}^"],
            hint="fix the JSON (a trailing comma or a missing quote is the usual cause)",
        ) from None
    return parse_servers(data, str(path))


# -- what depends on this machine --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpecProblem:
    """Something about a well-formed entry that would stop the server from starting here."""

    field: str  # env.NAME, headers.NAME or cwd
    message: str
    hint: str


def spec_problems(spec: ServerSpec) -> list[SpecProblem]:
    """What would keep a well-formed server from starting on this machine: `${VAR}` references to variables that
    are not set (its env and headers), a working folder that does not exist. Names only, never values."""
    found = []
    for part, pairs in (("env", spec.env), ("headers", spec.headers)):
        for key, value in pairs:
            for var in _VAR.findall(value):
                if var not in os.environ:
                    found.append(
                        SpecProblem(
                            f"{part}.{key}",
                            f"{part}.{key} refers to ${{{var}}}, which is not set in this environment",
                            f"export {var}=... before trainctl train (the server gets it when it starts; the value "
                            "is never saved)",
                        )
                    )
    if spec.transport == "stdio" and spec.cwd and not Path(spec.cwd).expanduser().is_dir():
        found.append(SpecProblem("cwd", f"cwd {spec.cwd!r} is not a folder", "give an existing folder, or drop cwd"))
    return found


# -- tools.servers and tools.servers_file --------------------------------------------------------------------------

_SCHEMA_TRANSPORTS = {"stdio": "stdio", "sse": "sse", "http": "streamable-http"}


def inline_transport(server: Any) -> str:
    """A tools.servers entry's transport: as set, else stdio for a command, sse for a url ending in /sse, streamable
    HTTP for another url (stdio when it has neither: the checks say what is missing)."""
    if server.transport:
        return _SCHEMA_TRANSPORTS[server.transport]
    if server.url and not server.command:
        return "sse" if server.url.rstrip("/").endswith("/sse") else "streamable-http"
    return "stdio"


def inline_spec(name: str, server: Any) -> ServerSpec:
    """A tools.servers entry (trainctl.config.schema.ToolServer, read by attribute: this package imports no config)
    as a ServerSpec; env names become `${NAME}` references, expanded from the environment only when it starts."""
    transport = inline_transport(server)
    if transport == "stdio":
        return ServerSpec(
            name,
            "stdio",
            command=server.command,
            args=tuple(str(a) for a in server.args or []),
            env=tuple((n, "${" + n + "}") for n in server.env or []),
            cwd=server.cwd,
        )
    return ServerSpec(name, transport, url=server.url)


def override_entry(server: Any) -> dict:
    """What a tools.servers entry sets, as mcpServers entry keys: applied to the servers file's entry of the same
    name (`merge_entry`). `tools` is not part of it (it narrows what the model may call, not how to reach it)."""
    out: dict[str, Any] = {}
    if server.transport:
        out["type"] = _SCHEMA_TRANSPORTS[server.transport]
    for key in ("command", "args", "cwd", "url"):
        value = getattr(server, key)
        if value is not None:
            out[key] = [str(a) for a in value] if key == "args" else value
    if server.env:
        out["env"] = {n: "${" + n + "}" for n in server.env}
    return out


def merge_entry(base: dict, override: dict) -> dict:
    """An mcpServers entry with an override applied: the override's keys win; a command replaces the url (and a
    url the command, its args, env and cwd); env names are added to the entry's env."""
    if not override:
        return dict(base)
    merged = dict(base)
    if "command" in override:
        for key in ("url", "headers"):
            merged.pop(key, None)
        if merged.get("type") not in (None, "stdio"):
            merged.pop("type")
    if "url" in override:
        for key in ("command", "args", "env", "cwd"):
            merged.pop(key, None)
    merged.update({k: v for k, v in override.items() if k != "env"})
    if "env" in override:
        merged["env"] = {**(merged.get("env") or {}), **override["env"]}
    return merged


def apply_override(spec: ServerSpec, override: dict, source: str) -> ServerSpec:
    """A servers file's server with a tools.servers override applied; raises TrainctlError for what the merged
    entry lacks (a url server made stdio without a command)."""
    return parse_server(spec.name, merge_entry(spec.to_json(), override), source) if override else spec


def server_specs(tools: Any) -> tuple[dict[str, ServerSpec], dict[str, ServerSpec]]:
    """(inline servers, servers from tools.servers_file), by name, of a tools section (trainctl.config.schema.Tools).

    A name in both is the file's server with the tools.servers entry's keys applied (the file's entry is the base,
    the override wins), listed with the file's servers. Raises TrainctlError / ConfigProblems for a file that
    cannot be read or parsed, or an override that leaves a server unusable."""
    from_file = load_servers(tools.servers_file) if tools.servers_file else {}
    inline = {name: inline_spec(name, s) for name, s in tools.servers.items() if name not in from_file}
    problems = []
    for name, server in tools.servers.items():
        if name in from_file:
            try:
                from_file[name] = apply_override(
                    from_file[name], override_entry(server), f"{tools.servers_file} with tools.servers.{name}"
                )
            except TrainctlError as e:
                problems.append(Problem(e.message, key=f"tools.servers.{name}", hint=e.hint))
    if problems:
        raise ConfigProblems(problems)
    return inline, from_file


def file_overrides(tools: Any) -> dict[str, dict]:
    """The overrides (`override_entry`) the tools.servers entries make to the servers file's servers, by name: what
    a worker applies again to the file's entry (the run's tools.yaml names the file, never its values)."""
    if not tools.servers_file or not tools.servers:
        return {}
    try:
        names = set(load_servers(tools.servers_file))
    except TrainctlError:
        return {}
    return {n: o for n, s in tools.servers.items() if n in names and (o := override_entry(s))}


def allowed_tools(tools: Any, name: str) -> list[str] | None:
    """The tools of server `name` the model may call (tools.servers.NAME.tools); None: every tool it lists."""
    server = tools.servers.get(name)
    return list(server.tools) if server is not None and server.tools is not None else None
