"""What the commands share: the consoles, option aliases, error rendering, and override completion."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from trainctl.errors import ConfigProblems, Problem, TrainctlError, UsageError
from trainctl.suggest import closest

if TYPE_CHECKING:
    from trainctl.config.search import SearchPath

# Commands that take Hydra-style overrides let unknown words through; we reject option-looking leftovers ourselves.
OVERRIDE_CONTEXT = {"ignore_unknown_options": True, "allow_extra_args": True}


def complete_overrides(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion for overrides: group names, their options, and trainctl keys."""
    from trainctl.config.search import GROUPS, SearchPath

    search = SearchPath.default()
    key, eq, prefix = incomplete.partition("=")
    if eq and key in GROUPS:
        return [f"{key}={o}" for o in search.options(key) if o.startswith(prefix)]
    words = [f"{g}=" for g in GROUPS]
    words += [f"{k}=" for k in _trainctl_keys(search)]
    return [w for w in words if w.startswith(incomplete)]


def _trainctl_keys(search) -> list[str]:
    """trainctl's own keys, from the schema that declares them (and the reward kinds' settings)."""
    from trainctl.backends.rewards import setting_keys
    from trainctl.config.schema import keys

    return [key for key, _, _ in [*keys(), *setting_keys()]]


Overrides = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="[OVERRIDES]...",
        help="group choices (algorithm=grpo model=qwen2.5-7b) and key=value settings, trainctl's or the backend's",
        autocompletion=complete_overrides,
        show_default=False,
    ),
]
ConfigDirs = Annotated[
    list[Path] | None,
    typer.Option(
        "--config-dir",
        help="a folder of your own config groups (model/, data/, recipe/, ...), searched before the built-in ones; "
        "./conf is searched too",
        show_default=False,
    ),
]
# one meaning everywhere: everything is checked, what would happen is printed, and nothing happens
DryRun = Annotated[
    bool,
    typer.Option(
        "--dry-run", help="check everything and print what would be done; nothing is started, downloaded or written"
    ),
]


def command_overrides(
    ctx: typer.Context, overrides: list[str] | None, config_dirs: list[Path] | None = None
) -> tuple[list[str], SearchPath]:
    """What every command that takes overrides starts with: its words (the declared argument, then what Click let
    through as extra args), with option typos refused, and the config search path (--config-dir, then ./conf)."""
    words = [*(overrides or []), *ctx.args]
    reject_option_typos(ctx, words)
    return words, search_path(config_dirs)


def tethered(command):
    """The command's processes end with it, however it ends: Ctrl-C, SIGTERM, SIGHUP or SIGKILL
    (trainctl.launchers.tether). For the commands that start servers and engines: model serve, chat, eval, serve."""
    import functools

    @functools.wraps(command)
    def run(*args, **kwargs):
        from trainctl.launchers.tether import Stopped, held

        with held():
            try:
                return command(*args, **kwargs)
            except Stopped as e:  # then the exit code of Ctrl-C (Typer's, 130)
                with contextlib.suppress(OSError, ValueError):
                    typer.echo(f"Stopped ({e}).", err=True)
                raise

    return run


def reject_option_typos(ctx: typer.Context, words: list[str]) -> None:
    """With unknown options let through as overrides, `--dryrun` would become an override: refuse it here."""
    known = [opt for p in ctx.command.params for opt in getattr(p, "opts", []) if opt.startswith("-")]
    for word in words:
        if word.startswith("-"):
            name = word.split("=", 1)[0]
            guess = closest(name, known, cutoff=0.5)
            raise UsageError(
                f"no such option: {name}",
                hint=f"did you mean {guess[0]}?" if guess else f"see: trainctl {ctx.command.name} --help",
            )


def search_path(config_dirs: list[Path] | None) -> SearchPath:
    from trainctl.config.search import SearchPath

    for d in config_dirs or []:
        if not d.expanduser().is_dir():
            raise UsageError(f"--config-dir {d}: no such folder.")
    return SearchPath.default(config_dirs)


def _problem_lines(p: Problem, indent: str) -> list[str]:
    lines = [f"{indent}{d}" for d in p.details]
    if p.hint:
        lines.append(f"{indent}Hint: {p.hint}")
    return lines


def render_warnings(warnings: list[Problem]) -> None:
    for w in warnings:
        typer.echo(f"Warning: {w.message}", err=True)
        for line in _problem_lines(w, "  "):
            typer.echo(line, err=True)


def render_error(e: TrainctlError) -> None:
    """Error:/Hint: lines on stderr; a secret from the environment never reaches them (a hub's message may quote
    a URL or header that carries one)."""
    from trainctl.secrets import Redactor

    redact = Redactor().text

    def say(line: str) -> None:
        typer.echo(redact(line), err=True)

    if isinstance(e, ConfigProblems):
        render_warnings(e.warnings)
        if len(e.problems) == 1:
            p = e.problems[0]
            say(f"Error: {p.message}")
            for d in p.details:
                say(f"  {d}")
            if p.hint:
                say(f"Hint: {p.hint}")
            return
        say(f"Error: {e.message}:")
        for i, p in enumerate(e.problems, 1):
            say(f"  {i}. {p.message}")
            for line in _problem_lines(p, "     "):
                say(line)
        return
    say(f"Error: {e.message}")
    for d in e.details:
        say(f"  {d}")
    if e.hint:
        say(f"Hint: {e.hint}")


def debug() -> bool:
    return os.environ.get("TRAINCTL_DEBUG", "") not in ("", "0")


def stdout_console():
    """rich output on stdout; when piped, lines are not wrapped (one line per row, for grep)."""
    from rich.console import Console

    width = None if sys.stdout.isatty() else 10_000
    return Console(file=sys.stdout, highlight=False, soft_wrap=True, width=width)


@contextlib.contextmanager
def progress_bar(label: str, total: int | None = None):
    """A callback advancing a progress bar on a terminal (nothing when output is redirected)."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = [SpinnerColumn(), TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)


@contextlib.contextmanager
def byte_progress(label: str):
    """A bytes progress bar on a terminal: progress(n) advances it, progress(0, total=N) sets its total."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    columns = [TextColumn(label), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn()]
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=None)

        def progress(n: int, total: int | None = None) -> None:
            if total is not None:
                bar.update(task, total=total)
            if n:
                bar.advance(task, n)

        yield progress


def checked_plan(words, search, launching: bool = False):
    """make_plan, with a status line on a terminal while the backend's own validation runs (it imports verl or
    TRL: seconds, where every other check takes milliseconds)."""
    from trainctl.plan import make_plan, validate_natively

    plan = make_plan(words, search, launching=launching, native=False)
    render = sys.stderr.isatty()
    if not render:
        validate_natively(plan)
        return plan
    from rich.console import Console

    what = "TRL" if plan.backend.node == "trl" else "verl"
    with Console(stderr=True).status(f"Checking with {what}'s own validation (it imports {what}: a few seconds)..."):
        validate_natively(plan)
    return plan
