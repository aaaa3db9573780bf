"""`trainctl doctor`."""

from __future__ import annotations

import typer

from trainctl.cli.common import ConfigDirs, Overrides, command_overrides


def doctor(ctx: typer.Context, overrides: Overrides = None, config_dir: ConfigDirs = None) -> None:
    """Check this machine (or the Ray cluster) against a config: versions, GPUs, engines, cluster, disk.

    Exit 1 when something the config needs is missing.
    """
    from trainctl.doctor import run_checks
    from trainctl.errors import TrainctlError
    from trainctl.plan import make_plan

    words, search = command_overrides(ctx, overrides, config_dir)
    checks = run_checks(make_plan(words, search, native=False))
    marks = {"ok": "ok", "warn": "WARN", "fail": "FAIL", "info": ""}
    width = max(len(c.name) for c in checks)
    # plain lines, as wide as their text: a table pads every row to the widest (a 150-column versions line), which
    # piped output keeps as trailing spaces
    for c in checks:
        typer.echo(f"{marks[c.status]:<4} {c.name:<{width}}  {c.detail}".rstrip())
    failed = [c for c in checks if c.status == "fail"]
    if failed:
        raise TrainctlError(f"{len(failed)} check(s) failed: {', '.join(c.name for c in failed)}.")
