"""`trainctl model ...`: the models the `model` group names."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    help="Models: build the tiny local model, pull from the hubs, inspect.", no_args_is_help=True, rich_markup_mode=None
)


@app.command(
    epilog="""\
\b
Examples:
  trainctl model init tiny                 build it where model=tiny looks for it
  trainctl model init tiny --out /tmp/m    somewhere else
"""
)
def init(
    name: Annotated[str, typer.Argument(help="the model to build: tiny")],
    out: Annotated[
        Path | None, typer.Option("--out", help="where to write it (default: the model group's path)")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="rebuild even if it is already there")] = False,
) -> None:
    """Build the tiny local model (tokenizer and random Qwen2 weights), the one the demo and the tests use."""
    from trainctl.errors import TrainctlError
    from trainctl.models.tiny import init_tiny
    from trainctl.plan import resolve

    if name != "tiny":
        raise TrainctlError(
            f"only `tiny` is built locally; {name!r} comes from a hub.", hint=f"trainctl model pull {name}"
        )
    target = out or Path(resolve(["model=tiny"]).tc["model"]["path"])
    existed = (target / "config.json").is_file()
    path = init_tiny(target, force=force)
    typer.echo(f"{'Already there' if existed and not force else 'Built'}: tiny model at {path}")
