"""`trainctl train`."""

from __future__ import annotations

from typing import Annotated

import typer

from trainctl.cli.common import (
    ConfigDirs,
    Overrides,
    reject_option_typos,
    render_warnings,
    search_path,
)

EPILOG = """\
\b
Examples:
  trainctl train recipe=quickstart --dry-run
      the embedded default: tiny model, arith data, SFT on CPU
  trainctl train algorithm=grpo model=qwen2.5-7b data=gsm8k hardware=8gpu logger=wandb --dry-run
      compose groups, check everything, print the plan; nothing starts
  trainctl train algorithm=grpo actor_rollout_ref.actor.optim.lr=5e-7 data.train_batch_size=512 --dry-run
      any backend key, written as in verl's own docs
  trainctl train -m algorithm=grpo,dapo model=qwen2.5-7b,qwen3-8b --dry-run
      a sweep: one plan per combination
"""


def train(
    ctx: typer.Context,
    overrides: Overrides = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="print the plan and exit: resolved config, launch command, numbers")
    ] = False,
    multirun: Annotated[
        bool, typer.Option("-m", "--multirun", help="sweep: key=a,b runs one plan per value (the product of all)")
    ] = False,
    config_dir: ConfigDirs = None,
) -> None:
    """Compose a config from groups, check it, and run it (or print the plan with --dry-run)."""
    from trainctl.cli.render import plan_text
    from trainctl.config.overrides import expand
    from trainctl.errors import TrainctlError
    from trainctl.plan import make_plan

    words = [*(overrides or []), *ctx.args]
    reject_option_typos(ctx, words)
    search = search_path(config_dir)
    points = expand(words, multirun, search)
    if not dry_run:
        raise TrainctlError(
            "launching is not available yet in this build.",
            hint="add --dry-run to check the config and print the plan",
        )
    for i, point in enumerate(points, 1):
        plan = make_plan(point, search, launching=not dry_run)
        title = f"Sweep point {i}/{len(points)}: {' '.join(point)}" if multirun else None
        render_warnings(plan.warnings)
        typer.echo(plan_text(plan, title))
    typer.echo("Dry run: nothing was started.")
