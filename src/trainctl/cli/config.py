"""`trainctl config show / validate / groups`."""

from __future__ import annotations

from typing import Annotated

import typer

from trainctl.cli.common import OVERRIDE_CONTEXT, ConfigDirs, Overrides, command_overrides, render_warnings, search_path

app = typer.Typer(
    help="Inspect and check configs without running anything.",
    no_args_is_help=True,
    # plain help: rich's help formatter costs ~0.12 s of imports, and `--help` must stay instant
    rich_markup_mode=None,
)


@app.command(
    context_settings=OVERRIDE_CONTEXT,
    epilog="""\
\b
Examples:
  trainctl config show algorithm=grpo model=qwen2.5-7b   the trainctl config, as YAML
  trainctl config show algorithm=grpo --backend          verl's whole ppo_trainer config
  trainctl config show recipe=quickstart --origin        each value with the file that set it
""",
)
def show(
    ctx: typer.Context,
    overrides: Overrides = None,
    backend: Annotated[
        bool, typer.Option("--backend", help="print the backend's config (verl's or TRL's) instead")
    ] = False,
    origin: Annotated[
        bool, typer.Option("--origin", help="mark each value with the file or override that set it")
    ] = False,
    config_dir: ConfigDirs = None,
) -> None:
    """Print the resolved config as YAML; any problems in it are shown below it (`config validate` refuses them).

    Exit 0 unless the config cannot be composed at all.
    """
    from trainctl.plan import make_plan

    words, search = command_overrides(ctx, overrides, config_dir)
    plan = make_plan(words, search, native=False, strict=False)
    _print_config(plan, backend, origin)
    render_warnings(plan.problems)
    if plan.errors:
        n = len(plan.errors)
        typer.echo(
            f"Note: {n} of these {'problems' if n > 1 else 'problem'} would stop `trainctl train` and "
            "`trainctl config validate`.",
            err=True,
        )


def _print_config(plan, backend: bool, origin: bool) -> None:
    from omegaconf import OmegaConf

    from trainctl.cli.render import yaml_with_origins

    if not backend:
        if not origin:
            typer.echo(plan.trainctl_yaml().rstrip())
            return
        tree = plan.trainctl_tree()
        comp = plan.comp
        typer.echo("\n".join(yaml_with_origins(tree, lambda p: comp.origin(p) or "conf/trainctl.yaml")))
        return
    if not origin:
        typer.echo(plan.backend_yaml().rstrip())
        return
    built = plan.built
    default_label = f"{plan.backend.title} default"

    def backend_origin(path: str) -> str:
        if path not in built.leaves:
            return default_label
        src = built.origins.get(path)
        if src is None:
            src = plan.comp.origin(f"{plan.backend.node}.{path}") or f"{plan.backend.node}.{path}"
        return src

    tree = OmegaConf.to_container(plan.backend_cfg, resolve=True, throw_on_missing=False)
    typer.echo("\n".join(yaml_with_origins(tree, backend_origin)))


@app.command(
    context_settings=OVERRIDE_CONTEXT,
    epilog="""\
\b
Examples:
  trainctl config validate algorithm=grpo model=qwen2.5-7b hardware=2x8gpu
  trainctl config validate recipe=dapo-math-qwen2.5-32b-4x8gpu && echo ok
""",
)
def validate(ctx: typer.Context, overrides: Overrides = None, config_dir: ConfigDirs = None) -> None:
    """Check a config, verl's own validation included: exit 0 when valid, 1 with every problem found."""
    from trainctl.cli.common import checked_plan

    words, search = command_overrides(ctx, overrides, config_dir)
    plan = checked_plan(words, search)
    render_warnings(plan.warnings)
    typer.echo(f"OK: {plan.cfg.algorithm.name} on {plan.backend.title} is valid.")


@app.command(
    epilog="""\
\b
Examples:
  trainctl config groups                        the built-in groups and options
  trainctl config groups --config-dir ~/team    with your team's own options (searched first)
"""
)
def groups(config_dir: ConfigDirs = None) -> None:
    """List every config group, its options, and what each one is."""
    from rich.table import Table

    from trainctl.cli.common import stdout_console
    from trainctl.config.search import GROUP_HELP, GROUPS, describe

    search = search_path(config_dir)
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("group")
    table.add_column("option")
    table.add_column("description")
    for group in GROUPS:
        table.add_row(f"[bold]{group}[/bold]", "", f"[dim]{GROUP_HELP[group]}[/dim]")
        for name, file in search.options(group).items():
            mine = "" if search.builtin in file.parents else f"  (from {file.parent.parent})"
            table.add_row("", name, describe(file) + mine)
    stdout_console().print(table)


@app.command(
    epilog="""\
\b
Examples:
  trainctl config keys                 every key of trainctl's own sections
  trainctl config keys hardware        the hardware section: type, range and meaning of each key
"""
)
def keys(
    section: Annotated[
        str | None, typer.Argument(help="one section: algorithm, model, data, hardware, logger, run, paths")
    ] = None,
) -> None:
    """List trainctl's own config keys with their types, ranges and meaning (from the schema)."""
    from rich.table import Table

    from trainctl.cli.common import stdout_console
    from trainctl.config.schema import SECTIONS
    from trainctl.config.schema import keys as schema_keys
    from trainctl.errors import UsageError
    from trainctl.suggest import closest

    if section is not None and section not in SECTIONS:
        guess = closest(section, SECTIONS)
        raise UsageError(
            f"no section {section!r}.",
            hint=f"did you mean {guess[0]}?" if guess else f"one of: {', '.join(SECTIONS)}",
        )
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("key", "type", "meaning"):
        table.add_column(col, overflow="fold")
    rows = schema_keys(section)
    if section in (None, "reward"):
        # each reward kind declares the settings it reads beside reward.kind
        from trainctl.backends.rewards import setting_keys

        last = max(i for i, (key, _, _) in enumerate(rows) if key.startswith("reward."))
        rows[last + 1 : last + 1] = setting_keys()
    for key, kind, doc in rows:
        table.add_row(key, kind, doc)
    stdout_console().print(table)
