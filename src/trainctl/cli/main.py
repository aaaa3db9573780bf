"""The `trainctl` command: registers the commands and holds the one error boundary."""

from __future__ import annotations

import functools
import sys

import typer

from trainctl import __version__
from trainctl.cli import ckpt as ckpt_cmd
from trainctl.cli import config as config_cmd
from trainctl.cli import data as data_cmd
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

app = typer.Typer(
    name="trainctl",
    help="Declarative post-training for LLMs: compose config groups into a checked verl or TRL run.",
    epilog="Start with: trainctl config groups, then trainctl train recipe=quickstart --dry-run",
    no_args_is_help=True,
    # plain help: rich's help formatter costs ~0.12 s of imports, and `--help` must stay instant
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
)
app.command(context_settings=OVERRIDE_CONTEXT, epilog=TRAIN_EPILOG)(train)
app.command("eval", context_settings=OVERRIDE_CONTEXT, epilog=EVAL_EPILOG)(eval_command)
app.command("chat", context_settings=OVERRIDE_CONTEXT, epilog=CHAT_EPILOG)(chat_command)
app.add_typer(config_cmd.app, name="config")
app.add_typer(data_cmd.app, name="data")
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
    """The click command Typer builds from `app`, once a process: building it reads every command's parameters from
    its signature (~70 ms, which `app()` pays on every call), and the test suite runs the CLI in its processes many
    times. With pretty exceptions off, `app()` does nothing more than call it."""
    return typer.main.get_command(app)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; every known failure becomes `Error:`/`Hint:` lines and an exit code (0 ok, 1 problem, 2 usage).

    Typer reports its own usage errors (unknown command or option, exit 2); trainctl's errors are rendered here.
    """
    from trainctl.cli.common import debug, render_error
    from trainctl.errors import EXIT_INTERRUPTED, EXIT_PROBLEM, TrainctlError
    from trainctl.import_cost import skip_sklearn
    from trainctl.silence import quiet_known_noise

    skip_sklearn()  # 2.4 s of CPU in each command that loads transformers' generation code
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
