"""`trainctl doctor`."""

from __future__ import annotations

import typer

from trainctl.cli.common import ConfigDirs, Overrides, command_overrides


def doctor(ctx: typer.Context, overrides: Overrides = None, config_dir: ConfigDirs = None) -> None:
    """Check this machine (or the Ray cluster) against a config: versions, GPUs, engines, cluster, disk.

    Exit 1 when something the config needs is missing.
    """
    from rich.table import Table

    from trainctl.cli.common import stdout_console
    from trainctl.doctor import run_checks
    from trainctl.errors import TrainctlError
    from trainctl.plan import make_plan

    words, search = command_overrides(ctx, overrides, config_dir)
    checks = run_checks(make_plan(words, search, native=False).cfg)
    table = Table(box=None, header_style="bold", pad_edge=False, show_header=False)
    marks = {"ok": "ok", "warn": "WARN", "fail": "FAIL", "info": ""}
    for c in checks:
        table.add_row(marks[c.status], c.name, c.detail)
    stdout_console().print(table)
    failed = [c for c in checks if c.status == "fail"]
    if failed:
        raise TrainctlError(f"{len(failed)} check(s) failed: {', '.join(c.name for c in failed)}.")
