"""The `trainctl` command: registers the commands and holds the one error boundary."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, MutableMapping
from typing import Any

import typer
from typer.core import TyperGroup

from trainctl import __version__
from trainctl.cli import ckpt as ckpt_cmd
from trainctl.cli import config as config_cmd
from trainctl.cli import data as data_cmd
from trainctl.cli import env as env_cmd
from trainctl.cli import jobs as jobs_cmd
from trainctl.cli import model as model_cmd
from trainctl.cli import runs as runs_cmd
from trainctl.cli import tools as tools_cmd
from trainctl.cli.chat import EPILOG as CHAT_EPILOG
from trainctl.cli.chat import chat_command
from trainctl.cli.common import OVERRIDE_CONTEXT
from trainctl.cli.doctor import doctor
from trainctl.cli.eval import EPILOG as EVAL_EPILOG
from trainctl.cli.eval import eval_command
from trainctl.cli.serve import EPILOG as SERVE_EPILOG
from trainctl.cli.serve import serve
from trainctl.cli.train import EPILOG as TRAIN_EPILOG
from trainctl.cli.train import train


class _Lazy(MutableMapping):
    """name -> click command, built by Typer from its registration on `app` when first looked up; while `brief`,
    an unbuilt one is a command with its name and help only (all the root's help lists)."""

    def __init__(self, entries: dict[str, tuple[Callable[[], Any], Callable[[], Any]]]):
        self.entries = entries  # name -> (build it, a brief stand-in)
        self.built: dict[str, Any] = {}
        self.brief = False

    def __getitem__(self, name: str):
        if name not in self.built:
            build, brief = self.entries[name]
            if self.brief:
                return brief()
            self.built[name] = build()
        return self.built[name]

    def __setitem__(self, name: str, cmd) -> None:
        self.entries[name] = (lambda: cmd, lambda: cmd)
        self.built[name] = cmd

    def __delitem__(self, name: str) -> None:
        del self.entries[name]
        self.built.pop(name, None)

    def __iter__(self):
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)


class _Root(TyperGroup):
    """The root group: its list of commands read without building them (see command())."""

    def list_commands(self, ctx) -> list[str]:
        return list(self.commands)

    def format_commands(self, ctx, formatter) -> None:
        lazy = isinstance(self.commands, _Lazy)
        if lazy:
            self.commands.brief = True
        try:
            super().format_commands(ctx, formatter)
        finally:
            if lazy:
                self.commands.brief = False


app = typer.Typer(
    name="trainctl",
    help="Declarative post-training for LLMs: compose config groups into a checked verl or TRL run.",
    epilog="Start with: trainctl config groups, then trainctl train recipe=quickstart --dry-run\n\n"
    "Documentation: docs/index.md (make docs-serve); every command: docs/reference/cli.md",
    no_args_is_help=True,
    # plain help: rich's help formatter costs ~0.12 s of imports, and `--help` must stay instant
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
    cls=_Root,
)
app.command(context_settings=OVERRIDE_CONTEXT, epilog=TRAIN_EPILOG)(train)
app.command("eval", context_settings=OVERRIDE_CONTEXT, epilog=EVAL_EPILOG)(eval_command)
app.command("chat", context_settings=OVERRIDE_CONTEXT, epilog=CHAT_EPILOG)(chat_command)
app.add_typer(config_cmd.app, name="config")
app.add_typer(data_cmd.app, name="data")
app.add_typer(env_cmd.app, name="env")
app.add_typer(model_cmd.app, name="model")
app.add_typer(jobs_cmd.app, name="jobs")
app.add_typer(ckpt_cmd.app, name="ckpt")
app.add_typer(runs_cmd.app, name="runs")
app.add_typer(tools_cmd.app, name="tools")
app.command(epilog=SERVE_EPILOG)(serve)
app.command(
    context_settings=OVERRIDE_CONTEXT,
    epilog="""\
\b
Examples:
  trainctl doctor                            this machine, with the default hardware=cpu
  trainctl doctor hardware=4x8gpu            the Ray cluster RAY_ADDRESS names, against 4 x 8 GPUs
""",
)(doctor)


# where each command's reference section is: docs/reference/cli.md, generated from this app (trainctl.docsgen), one
# section a command, its anchor the command's words joined by dashes
REFERENCE = "docs/reference/cli.md"
REFERENCE_LINE = "Reference: "


def reference_anchor(path: list[str]) -> str:
    return "-".join(["trainctl", *path])


def _link_reference(typer_app: typer.Typer, path: list[str]) -> None:
    """End each command's and group's help with the line naming its section of the command reference."""
    from typer.main import get_command_name

    for info in typer_app.registered_commands:
        name = info.name or get_command_name(info.callback.__name__)
        info.epilog = _with_reference(info.epilog, [*path, name])
    for info in typer_app.registered_groups:
        group = info.typer_instance
        epilog = info.epilog if isinstance(info.epilog, str) else group.info.epilog
        info.epilog = _with_reference(epilog if isinstance(epilog, str) else None, [*path, info.name])
        _link_reference(group, [*path, info.name])


def _with_reference(epilog: str | None, path: list[str]) -> str:
    line = f"{REFERENCE_LINE}{REFERENCE}#{reference_anchor(path)}"
    return f"{epilog.rstrip()}\n\n{line}" if epilog else line


_link_reference(app, [])


def _version(value: bool) -> None:
    if value:
        typer.echo(f"trainctl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="print the version"),
) -> None:
    pass


@functools.cache
def command():
    """The click command Typer builds from `app`, once a process (the test suite runs the CLI in its processes many
    times); with pretty exceptions off, `app()` does nothing more than call it. Each command under the root is built
    when first looked up: building one reads its parameters from its signature, ~35 ms for them all (a third of
    `trainctl --help`), and the root's list of commands needs only their names and help."""
    registered = app.registered_commands, app.registered_groups
    app.registered_commands, app.registered_groups = [], []
    try:
        root = typer.main.get_command(app)  # the root's own options
    finally:
        app.registered_commands, app.registered_groups = registered
    root.commands = _Lazy(_registrations())
    return root


def _registrations() -> dict[str, tuple[Callable[[], Any], Callable[[], Any]]]:
    """`app`'s commands, then its groups, as Typer's get_group_from_info builds them, with their brief stand-ins."""
    import inspect

    from typer.core import TyperCommand
    from typer.main import get_command_from_info, get_command_name, get_group_from_info, solve_typer_info_defaults

    style = {"pretty_exceptions_short": app.pretty_exceptions_short, "rich_markup_mode": app.rich_markup_mode}
    out = {}
    for info in app.registered_commands:
        name = info.name or get_command_name(info.callback.__name__)
        text = inspect.getdoc(info.callback) if info.help is None else inspect.cleandoc(info.help)
        brief = functools.partial(
            info.cls or TyperCommand,
            name=name,
            help=text,
            short_help=info.short_help,
            hidden=info.hidden,
            deprecated=info.deprecated,
        )
        out[name] = (functools.partial(get_command_from_info, info, **style), brief)
    for info in app.registered_groups:
        solved = solve_typer_info_defaults(info)
        brief = functools.partial(
            solved.cls or TyperGroup,
            name=solved.name,
            help=solved.help,
            short_help=solved.short_help,
            hidden=solved.hidden,
            deprecated=solved.deprecated,
        )
        build = functools.partial(get_group_from_info, info, suggest_commands=app.suggest_commands, **style)
        out[solved.name] = (build, brief)
    return out


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; every known failure becomes `Error:`/`Hint:` lines and an exit code (0 ok, 1 problem, 2 usage).

    Typer reports its own usage errors (unknown command or option, exit 2); trainctl's errors are rendered here.
    """
    from trainctl.cli.common import debug, render_error
    from trainctl.errors import EXIT_INTERRUPTED, EXIT_PROBLEM, TrainctlError
    from trainctl.import_cost import pause_collector_for_heavy_loads, skip_unused
    from trainctl.paths import library_cache_env
    from trainctl.silence import quiet_known_noise

    os.environ.update(library_cache_env(os.environ))  # nothing written under ~ (matplotlib's font list)
    skip_unused()  # ~3 s of CPU in each command that loads transformers' generation code and a model
    pause_collector_for_heavy_loads()
    quiet_known_noise()  # a real model's warnings on every load: to the debug log (issue 44)
    if debug():
        from trainctl.silence import show_debug_log

        show_debug_log()  # library warnings trainctl routes there (trainctl.silence.library_logs)
    try:
        command()(args=argv, prog_name="trainctl")
    except TrainctlError as e:
        if debug():
            raise
        render_error(e)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        typer.echo("Interrupted.", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except Exception as e:  # a bug, or a library failing in a way trainctl does not know: one line, and how to see more
        if debug():
            raise
        from trainctl.secrets import Redactor

        text = Redactor().text(str(e).strip().splitlines()[0] if str(e).strip() else "")
        typer.echo(f"Error: unexpected {type(e).__name__}" + (f": {text}" if text else ""), err=True)
        typer.echo("Hint: TRAINCTL_DEBUG=1 shows the traceback (please include it in a bug report)", err=True)
        sys.exit(EXIT_PROBLEM)
