"""`trainctl tools ls / call`: the MCP servers and functions of a tools config, as a run starts or reaches them."""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from collections.abc import Iterator
from typing import Annotated

import typer

from trainctl.cli.common import OVERRIDE_CONTEXT, ConfigDirs, Overrides, reject_option_typos, search_path
from trainctl.errors import EXIT_NO_ANSWER, EXIT_TOOL_ERROR

app = typer.Typer(
    help="MCP servers and function tools: list them and their schemas' prompt cost, call one tool.",
    no_args_is_help=True,
    rich_markup_mode=None,
    epilog="""\
\b
Examples:
  trainctl tools ls recipe=agent-arith-tiny-cpu       a recipe's servers, their tools and prompt tokens
  trainctl tools call calculator.calculator --args '{"expression": "6 * 7"}' tools=calculator
""",
)

AsJson = Annotated[bool, typer.Option("--json", help="print JSON (for scripts) instead of text")]


@contextlib.contextmanager
def _config(words: list[str], config_dir) -> Iterator:
    """The composed trainctl config; run.dir is a temporary folder unless given, so that a server that writes
    into the run folder (the calculator's --log) leaves nothing in runs/."""
    from trainctl.config.load import load

    scratch = None
    if not any(w.split("=", 1)[0].lstrip("+") == "run.dir" for w in words):
        scratch = tempfile.mkdtemp(prefix="trainctl-tools-")
        words = [*words, f"run.dir={scratch}"]
    try:
        yield load(words, search_path(config_dir)).cfg
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)


def _no_tools(cfg) -> None:
    from trainctl.backends.tools import enabled
    from trainctl.errors import TrainctlError

    if not enabled(cfg.tools):
        raise TrainctlError(
            f"tools={cfg.tools.name} gives the model no tools.",
            hint="choose a tools option (trainctl tools ls tools=calculator), or servers of your own: "
            "trainctl tools ls tools.servers_file=mcp.json",
        )


@app.command(
    "ls",
    context_settings=OVERRIDE_CONTEXT,
    epilog="""\
\b
Examples:
  trainctl tools ls tools=calculator                       the built-in calculator server (started, listed, stopped)
  trainctl tools ls recipe=agent-arith-tiny-cpu            a recipe's servers; token costs for its model
  trainctl tools ls tools.servers_file=mcp.json model=qwen2.5-7b
\b
Exit codes: 0 every server listed; 1 a server could not be started or reached (the others are still listed), or
a problem in the config.
""",
)
def ls(ctx: typer.Context, overrides: Overrides = None, as_json: AsJson = False, config_dir: ConfigDirs = None) -> None:
    """Start (stdio) or reach (SSE, streamable HTTP) every server of the composed tools config, as a run would, and
    list its tools: their parameters, and the prompt tokens their schemas cost with the chosen model's chat
    template. Function tools (tools.functions) are listed too."""
    from trainctl.cli.common import render_warnings
    from trainctl.toolenv.servers import list_tools

    words = [*(overrides or []), *ctx.args]
    reject_option_typos(ctx, words)
    with _config(words, config_dir) as cfg:
        _no_tools(cfg)
        listing = list_tools(cfg)
    if as_json:
        typer.echo(json.dumps(listing.to_json(), indent=2))
    else:
        _print_listing(listing)
    if listing.problems:
        from trainctl.errors import ConfigProblems

        render_warnings([])
        raise ConfigProblems(listing.problems)


def _print_listing(listing) -> None:
    for server in listing.servers:
        typer.echo(f"{server.name}  ({server.source})  {server.where}")
        if server.problem is not None:
            typer.echo("  could not be listed (see the error below)")
            continue
        about = []
        if server.info and server.info.get("name"):
            about.append(f"server {server.info['name']} {server.info.get('version') or ''}".rstrip())
        if server.seconds is not None:
            about.append(f"listed in {server.seconds:.2f} s")
        if about:
            typer.echo("  " + " · ".join(about))
        width = max((len(t.name) for t in server.tools), default=0)
        for tool in server.tools:
            tokens = f"{tool.tokens:>5} tokens" if tool.tokens is not None else ""
            typer.echo(f"  {tool.name:<{width}}  {tokens}  {tool.description}".rstrip())
            params = tool.parameters.get("properties") or {}
            required = set(tool.parameters.get("required") or [])
            for pname, p in params.items():
                kind = p.get("type")
                kind = "|".join(kind) if isinstance(kind, list) else kind
                flag = "required" if pname in required else "optional"
                extra = f"  one of {p['enum']}" if p.get("enum") else ""
                typer.echo(f"      {pname}: {kind} ({flag}){extra}  {p.get('description') or ''}".rstrip())
            if not tool.allowed:
                typer.echo(f"      not given to the model (tools.servers.{server.name}.tools leaves it out)")
    allowed = sum(1 for s in listing.servers for t in s.tools if t.allowed)
    if listing.tokens is not None:
        typer.echo(
            f"Schemas of the {allowed} tool{'s' if allowed != 1 else ''} the model may call: {listing.tokens} prompt "
            f"tokens of every prompt with model={listing.model}'s chat template "
            f"(data.max_prompt_length = {listing.max_prompt_length})."
        )
        if listing.tokens >= listing.max_prompt_length:
            from trainctl.toolenv.servers import fit_hint

            narrower = fit_hint(listing)
            typer.echo(
                "Warning: they leave no room for the question: raise data.max_prompt_length"
                + (f", or allow fewer tools: {narrower}" if narrower else ""),
                err=True,
            )
    elif listing.note:
        typer.echo(f"{allowed} tool{'s' if allowed != 1 else ''} the model may call; {listing.note}.")


@app.command(
    "call",
    context_settings=OVERRIDE_CONTEXT,
    epilog="""\
\b
Examples:
  trainctl tools call calculator.calculator --args '{"expression": "6 * 7"}' tools=calculator
  trainctl tools call search.fetch --args '{"url": "https://example.com"}' tools.servers_file=mcp.json
  trainctl tools call calculator --args '{"expression": "2 ** 10"}' tools=calculator-fn   a function tool
\b
Exit codes (for scripts):
  0  the tool answered
  1  no such server or tool (with a did-you-mean), a server that does not start or answer, a config problem
  2  the command line is malformed (--args that is not a JSON object)
  4  the server answered with an error (arguments it refused, a tool that raised)
  5  no answer: the call timed out or the server went away during it
""",
)
def call_command(
    ctx: typer.Context,
    target: Annotated[str, typer.Argument(metavar="SERVER.TOOL", help="the tool (a function tool: its name alone)")],
    args: Annotated[str, typer.Option("--args", help="the arguments, a JSON object")] = "{}",
    timeout: Annotated[
        float | None, typer.Option("--timeout", help="seconds (default: tools.call_timeout_s)", show_default=False)
    ] = None,
    as_json: AsJson = False,
    overrides: Overrides = None,
    config_dir: ConfigDirs = None,
) -> None:
    """Call one tool once, as a run's worker calls it, and print what the model would read (cut at
    tools.max_tool_response_length, as verl cuts it) and how long the call took."""
    from trainctl.errors import UsageError
    from trainctl.toolenv.servers import call, parse_arguments

    words = [*(overrides or []), *ctx.args]
    reject_option_typos(ctx, words)
    try:
        arguments = parse_arguments(args)
    except Exception as e:
        raise UsageError(getattr(e, "message", str(e)), hint=getattr(e, "hint", None)) from None
    with _config(words, config_dir) as cfg:
        _no_tools(cfg)
        report = call(cfg, target, arguments, timeout)
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        how = "answered" if not report.is_error else "answered with an error" if report.answered else "no answer"
        start = f" (server ready in {report.connect_seconds:.2f} s)" if report.server != "functions" else ""
        typer.echo(f"{report.server}.{report.tool}: {how} in {report.seconds * 1000:.1f} ms{start}", err=True)
        typer.echo(report.text)
        if report.chars > report.limit:
            typer.echo(
                f"Note: cut to tools.max_tool_response_length = {report.limit} characters, as the model reads it "
                f"(the answer has {report.chars}).",
                err=True,
            )
        if not report.allowed:
            typer.echo(
                f"Note: a run does not give {report.tool!r} to the model (tools.servers.{report.server}.tools "
                "leaves it out).",
                err=True,
            )
    if not report.answered:
        raise typer.Exit(EXIT_NO_ANSWER)
    if report.is_error:
        raise typer.Exit(EXIT_TOOL_ERROR)
