"""`trainctl data ...`: the datasets the `data` group names, in each trainer's format."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    help="Data: prepare datasets in the format each trainer reads.", no_args_is_help=True, rich_markup_mode=None
)


@app.command(
    epilog="""\
\b
Examples:
  trainctl data prep arith                 generate the embedded default dataset
"""
)
def prep(
    name: Annotated[str, typer.Argument(help="a data group option: arith, gsm8k, math, hh-rlhf, ...")],
    out: Annotated[Path | None, typer.Option("--out", help="where to write (default: the data group's dir)")] = None,
) -> None:
    """Write a dataset's train and test files, in every format the data group lists."""
    from trainctl.data.prep import prepare

    for line in prepare(name, out):
        typer.echo(line)
