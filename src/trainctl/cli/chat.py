"""`trainctl chat`: talk to a model, run or checkpoint in the terminal, with the run's tools."""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from trainctl.cli.common import (
    ConfigDirs,
    Overrides,
    reject_option_typos,
    render_warnings,
    search_path,
    tethered,
)

EPILOG = """\
\b
Examples:
  trainctl chat tiny                                  the tiny model, greedy, as eval samples it
  trainctl chat runs/grpo temperature=0.7             a run's latest checkpoint (merged into the cache once)
  trainctl chat tiny-tools tools=calculator           the run's tools are really called, results shown
  trainctl chat runs/agent-arith-tiny-cpu             a run with tools: its own tools (tools=none: without)
  echo 'What is 12 + 30?' | trainctl chat tiny-tools tools=calculator     one answer per input line
\b
In the chat:
  /reset          forget the conversation
  /system TEXT    a system prompt (starts a new conversation); /system alone removes it
  /temp X         sampling temperature (0 is greedy)
  /help, /exit    (Ctrl-D exits too; Ctrl-C stops an answer)
\b
Exit codes: 0 the input ended (or /exit), 1 a problem found before loading (the model, checkpoint, base model,
tools), 2 a usage error, 130 interrupted at the prompt.
"""

HELP = "/reset  forget the conversation · /system TEXT  a system prompt · /temp X  temperature · /exit"


@tethered
def chat_command(
    ctx: typer.Context,
    model: Annotated[
        str,
        typer.Argument(help="a model option, a Hugging Face folder, a run folder, or one checkpoint (as eval)"),
    ],
    overrides: Overrides = None,
    json_lines: Annotated[
        bool, typer.Option("--json", help="with piped input: one JSON object per answer (text, tool calls, results)")
    ] = False,
    config_dir: ConfigDirs = None,
) -> None:
    """Chat with a model, a run or a checkpoint: its chat template, streamed tokens, history, and the run's tools.

    Sampling defaults are the run's validation settings (greedy unless val_kwargs say otherwise) and
    data.max_response_length tokens per answer; the words temperature, top_p, top_k, max_tokens, seed change them.
    Piped input (not a terminal) gets one answer per input line on stdout (a newline inside an answer written as
    \\n; --json for the exact text and the tool calls); tool calls and their results go to stderr as they happen.
    """
    from trainctl import scratch as temporary
    from trainctl.inference.model import prepare

    words = [*(overrides or []), *ctx.args]
    reject_option_typos(ctx, words)
    # the run's tool servers write their logs under run.dir: a folder of this chat's own, removed at the end. It is
    # made, as vLLM (in this process) makes its rendezvous file, in the command's temporary folder under trainctl's
    # cache (trainctl.scratch): what a SIGKILL leaves there, the next trainctl removes
    with temporary.for_this_process():
        scratch = Path(tempfile.mkdtemp(prefix="trainctl-chat-"))
        conversation = None
        try:
            served = prepare(model, [*words, f"run.dir={scratch}"], search=search_path(config_dir), command="chat")
            render_warnings(served.warnings)
            conversation = _start(served)
            interactive = sys.stdin.isatty()
            if interactive:
                _interactive(conversation, served)
            else:
                _piped(conversation, json_lines)
        finally:
            if conversation is not None and conversation.tools is not None:
                conversation.tools.close()
            shutil.rmtree(scratch, ignore_errors=True)


def _start(served):
    from transformers.utils import logging as hf_logging

    from trainctl.inference.chat import start

    hf_logging.disable_progress_bar()
    from trainctl.backends.tools import enabled

    def say(line: str) -> None:
        typer.echo(line, err=True)

    if enabled(served.cfg.tools):
        say(f"Checking tools={served.cfg.tools.name} as a run checks it (its MCP servers started and listed)")
    return start(served, status=say)


def _describe(conversation, served) -> str:
    s = served.sampling
    how = "greedy" if conversation.temperature == 0 else f"temperature {conversation.temperature:g}"
    tools = ", ".join(conversation.tools.names) if conversation.tools else "none"
    return f"{served.describe()} · {how}, max {s.max_tokens} tokens · tools: {tools}"


def _command(conversation, line: str) -> str | None:
    """Run a /command; returns what to say about it (None: not a command)."""
    from trainctl.errors import TrainctlError

    name, _, arg = line.strip().partition(" ")
    if name == "/reset":
        conversation.reset()
        return "conversation reset"
    if name == "/system":
        conversation.set_system(arg.strip())
        return (
            f"system prompt set ({len(arg.strip())} characters); conversation reset"
            if arg.strip()
            else ("system prompt removed; conversation reset")
        )
    if name == "/temp":
        try:
            t = conversation.set_temperature(arg.strip())
        except TrainctlError as e:
            return f"{e.message} ({e.hint})"
        return f"temperature {t:g}" + (" (greedy)" if t == 0 else "")
    if name == "/help":
        return HELP
    return f"unknown command {name} ({HELP})"


class _Terminal:
    """What a turn shows on a terminal: text as it comes, each tool call and its result on lines of their own."""

    def __init__(self, console):
        self.console = console
        self.at_line_start = True

    def prompt(self) -> None:
        self.console.print("[bold cyan]model>[/bold cyan] ", end="")
        self.at_line_start = False

    def newline(self) -> None:
        if not self.at_line_start:
            self.console.print()
            self.at_line_start = True

    def __call__(self, event) -> None:
        if event.kind == "text":
            self.console.file.write(event.text)
            self.console.file.flush()
            self.at_line_start = event.text.endswith("\n")
            return
        self.newline()
        if event.kind == "call":
            self.console.print(f"  → {event.call.name}({event.call.arguments})", style="yellow", markup=False)
        elif event.kind == "result":
            r = event.result
            style = "red" if r.error else "green"
            self.console.print(f"  ← {r.text}   ({r.seconds:.2f} s)", style=style, markup=False)
            self.prompt()
        elif event.kind == "notice":
            self.console.print(f"  ({event.text})", style="dim", markup=False)


def _interactive(conversation, served) -> None:
    from rich.console import Console

    with contextlib.suppress(ImportError):
        import readline  # noqa: F401  line editing and history at the prompt

    console = Console(highlight=False)
    console.print(f"[bold]trainctl chat[/bold] · {_describe(conversation, served)}", markup=True)
    console.print(HELP, style="dim")
    while True:
        try:
            line = console.input("[bold green]you>[/bold green] ")
        except EOFError:
            console.print()
            return
        if not line.strip():
            continue
        if line.strip() in ("/exit", "/quit"):
            return
        if line.startswith("/"):
            console.print(_command(conversation, line), style="dim")
            continue
        show = _Terminal(console)
        show.prompt()
        try:
            conversation.say(line, show)
        except KeyboardInterrupt:
            console.print("\n(stopped; the question is forgotten)", style="dim")
            continue
        show.newline()


class _Lines:
    """What a turn writes when the input is piped: the calls and results to stderr as they happen, kept for --json."""

    def __init__(self):
        self.calls: list[dict] = []

    def __call__(self, event) -> None:
        if event.kind == "call":
            typer.echo(f"→ {event.call.name}({event.call.arguments})", err=True)
        elif event.kind == "result":
            r = event.result
            typer.echo(f"← {r.text}", err=True)
            self.calls.append({"name": r.name, "arguments": r.arguments, "result": r.text, "error": r.error})
        elif event.kind == "notice":
            typer.echo(f"({event.text})", err=True)


def _piped(conversation, json_lines: bool) -> None:
    for raw in sys.stdin:
        line = raw.rstrip("\n")
        if not line.strip():
            continue
        if line.strip() in ("/exit", "/quit"):
            return
        if line.startswith("/"):
            typer.echo(_command(conversation, line), err=True)
            continue
        lines = _Lines()
        answer = conversation.say(line, lines)
        if json_lines:
            typer.echo(json.dumps({"input": line, "answer": answer, "tool_calls": lines.calls}, ensure_ascii=False))
        else:  # one line per answer: a newline inside it is written as \n (and a backslash as \\)
            typer.echo(answer.replace("\\", "\\\\").replace("\n", "\\n"))
        sys.stdout.flush()
