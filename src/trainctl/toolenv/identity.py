"""What each server of a run's tool environment is, for the run's lock.json, and how two such records differ.

Per MCP server: how it is reached (its command line with secret-looking options masked, or its URL without
credentials), the package behind it where that can be known without a network (an npm package `npx` runs, pinned
or found in npx's cache; a PyPI package `uvx` / `pipx run` runs, when pinned; a Python module or file of this
environment, by the distribution that installed it), its name and version from MCP's initialize, and a sha256 of
its tool schemas (names, descriptions, input schemas). Function tools: their specs and the sha256 of their schemas.

`trainctl train --resume` (and the agent eval) compares the record of the training run with the servers of now and
warns where they differ: a model trained against one version of a server and run against another is a silent
distribution shift.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import re
import sys
from pathlib import Path
from typing import Any

LOCK_KEY = "tools"  # lock.json's key for the tool environment


def schemas_hash(tools: list) -> str:
    """sha256 of a server's tool listing (mcp.types.Tool or their dicts): names, descriptions, input schemas."""
    rows = []
    for tool in tools:
        data = tool if isinstance(tool, dict) else tool.model_dump(by_alias=True, exclude_none=True)
        schema = data.get("inputSchema") or data.get("input_schema") or data.get("parameters") or {}
        rows.append({"name": data.get("name"), "description": data.get("description"), "input_schema": schema})
    rows.sort(key=lambda r: str(r["name"]))
    return hashlib.sha256(json.dumps(rows, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


RUN_FOLDER = "<run>"  # the run's own folder in a recorded command line


def server_record(discovered: Any, run_dir: str | Path | None = None) -> dict:
    """One discovered server (trainctl.mcp.discovery.Discovered) as lock.json keeps it. The run's folder in its
    command line (the calculator's `--log <run>/tools/calculator.jsonl`) is written as <run>: a run moved, copied
    or evaluated elsewhere runs the same server."""
    spec = discovered.server
    record: dict[str, Any] = {"transport": spec.transport}
    if spec.transport == "stdio":
        record["command"] = spec.command_line()
        if run_dir is not None:
            record["command"] = record["command"].replace(str(Path(run_dir).expanduser().resolve()), RUN_FOLDER)
    else:
        from trainctl.mcp.specs import strip_userinfo

        record["url"] = strip_userinfo(spec.url or "")
    package = package_of(spec.command, list(spec.args)) if spec.transport == "stdio" else None
    if package:
        record["package"] = package
    if discovered.server_info:
        record["server_info"] = dict(discovered.server_info)  # a copy: a record is its own (lock.json, changes)
    record["tools"] = sorted(t.name for t in discovered.tools)
    record["schemas_sha256"] = schemas_hash(discovered.tools)
    return record


def environment(
    servers: dict[str, Any], functions: dict[str, dict] | None = None, run_dir: str | Path | None = None
) -> dict:
    """The tool environment of a run: its MCP servers (name -> Discovered) and its function tools (spec ->
    OpenAI schema); `run_dir`: the folder written as <run> in command lines."""
    out: dict[str, Any] = {"servers": {name: server_record(d, run_dir) for name, d in sorted(servers.items())}}
    if functions:
        out["functions"] = {
            spec: {"schemas_sha256": schemas_hash([schema["function"]])} for spec, schema in sorted(functions.items())
        }
    return out


# -- the package behind a command ------------------------------------------------------------------------------

_NPM_NAME = re.compile(r"^(@[^/@\s]+/)?[^/@\s]+")


def package_of(command: str | None, args: list[str]) -> dict | None:
    """{"registry", "name", "version"} of the package a stdio command runs, where it can be known (version None:
    not pinned and not found here)."""
    if not command:
        return None
    program = Path(command).name
    if program in ("npx", "bunx", "pnpx"):
        return _npx(args)
    if program in ("uvx", "pipx"):
        return _pypi_runner(program, args)
    if re.fullmatch(r"python[0-9.]*", program) or command == sys.executable:
        return _python(command, args)
    return None


def _npx(args: list[str]) -> dict | None:
    rest, package = list(args), None
    while rest:
        word = rest.pop(0)
        if word in ("-p", "--package") and rest:
            package = rest.pop(0)
            break
        if word.startswith("--package="):
            package = word.split("=", 1)[1]
            break
        if not word.startswith("-"):
            package = word
            break
    if not package or not _NPM_NAME.match(package):
        return None
    name = _NPM_NAME.match(package).group(0)
    version = package[len(name) + 1 :] if package[len(name) :].startswith("@") else None
    if not version or version == "latest":
        version = _npx_cached(name)
    return {"registry": "npm", "name": name, "version": version}


def _npx_cached(name: str) -> str | None:
    """The version of `name` in npx's cache (~/.npm/_npx/*/node_modules/NAME/package.json), the newest install."""
    found = []
    for path in (Path.home() / ".npm" / "_npx").glob(f"*/node_modules/{name}/package.json"):
        try:
            found.append((path.stat().st_mtime, json.loads(path.read_text())["version"]))
        except (OSError, ValueError, KeyError):
            continue
    return max(found)[1] if found else None


def _pypi_runner(program: str, args: list[str]) -> dict | None:
    rest = list(args)
    if program == "pipx" and rest[:1] == ["run"]:
        rest = rest[1:]
    package = None
    while rest:
        word = rest.pop(0)
        if word in ("--from", "--spec") and rest:
            package = rest.pop(0)
            break
        if word.startswith(("--from=", "--spec=")):
            package = word.split("=", 1)[1]
            break
        if not word.startswith("-"):
            package = word
            break
    if not package:
        return None
    m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?(?:(?:==|@)([^\s,;]+))?", package)
    if not m:
        return None
    return {"registry": "pypi", "name": m.group(1), "version": m.group(2)}


def _python(command: str, args: list[str]) -> dict | None:
    """The distribution of the module (`-m pkg.mod`) or file a Python command runs: known for this environment's
    interpreter only."""
    if command not in (sys.executable, "python", "python3") and Path(command).name != Path(sys.executable).name:
        return None
    top = None
    if args[:1] == ["-m"] and len(args) > 1:
        top = args[1].split(".")[0]
    elif args and args[0].endswith(".py"):
        top = _top_package(Path(args[0]))
    if not top:
        return None
    # an editable install names no top-level packages: the distribution named like the package then
    dists = importlib.metadata.packages_distributions().get(top) or [top]
    for dist in dists:
        try:
            return {"registry": "pypi", "name": dist, "version": importlib.metadata.version(dist)}
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _top_package(path: Path) -> str | None:
    """The top-level package a file belongs to: its first folder under the deepest sys.path entry holding it."""
    path = path.expanduser().resolve()
    found = None
    for entry in sys.path:
        try:
            root = Path(entry or ".").resolve()
            relative = path.relative_to(root)
        except (ValueError, OSError):
            continue
        if len(relative.parts) > 1 and (found is None or len(root.parts) > len(found[0].parts)):
            found = (root, relative.parts[0])
    return found[1] if found else None


# -- differences ---------------------------------------------------------------------------------------------------


def changes(before: dict | None, after: dict | None) -> list[str]:
    """How the tool environment `after` differs from `before` (lock.json records), one sentence per difference."""
    if not before and not after:
        return []
    if not before:
        return ["the run had no tools recorded; it has tools now"]
    if not after:
        return ["the run was trained with tools; there are none now"]
    out = []
    old, new = before.get("servers") or {}, after.get("servers") or {}
    for name in sorted(set(old) - set(new)):
        out.append(f"MCP server {name!r} is gone")
    for name in sorted(set(new) - set(old)):
        out.append(f"MCP server {name!r} is new")
    for name in sorted(set(old) & set(new)):
        a, b = old[name], new[name]
        where = "command" if a.get("transport") == "stdio" else "url"
        if a.get(where) != b.get(where):
            out.append(f"MCP server {name!r}: its {where} was {a.get(where)!r}, now {b.get(where)!r}")
        if (a.get("package") or {}).get("version") != (b.get("package") or {}).get("version"):
            out.append(
                f"MCP server {name!r}: package {(b.get('package') or a.get('package') or {}).get('name')} "
                f"{_version(a.get('package'))} -> {_version(b.get('package'))}"
            )
        if (a.get("server_info") or {}) != (b.get("server_info") or {}):
            out.append(f"MCP server {name!r}: it says it is {_info(a)} then, {_info(b)} now")
        if a.get("schemas_sha256") != b.get("schemas_sha256"):
            gone = sorted(set(a.get("tools") or []) - set(b.get("tools") or []))
            added = sorted(set(b.get("tools") or []) - set(a.get("tools") or []))
            parts = [f"tools gone: {', '.join(gone)}"] if gone else []
            parts += [f"new: {', '.join(added)}"] if added else []
            what = "; ".join(parts)
            out.append(f"MCP server {name!r}: its tool schemas changed" + (f" ({what})" if what else ""))
    old_fn, new_fn = before.get("functions") or {}, after.get("functions") or {}
    for spec in sorted(set(old_fn) | set(new_fn)):
        if old_fn.get(spec) != new_fn.get(spec):
            state = "is gone" if spec not in new_fn else "is new" if spec not in old_fn else "changed its schema"
            out.append(f"function tool {spec!r} {state}")
    return out


def _version(package: dict | None) -> str:
    return str((package or {}).get("version") or "?")


def _info(record: dict) -> str:
    info = record.get("server_info") or {}
    return f"{info.get('name') or '?'} {info.get('version') or ''}".strip()


def saved(run_dir: str | Path) -> dict | None:
    """The tool environment a run recorded in its lock.json (None: none recorded)."""
    try:
        return json.loads((Path(run_dir) / "lock.json").read_text()).get(LOCK_KEY)
    except (OSError, ValueError, AttributeError):
        return None
