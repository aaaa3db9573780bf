"""`trainctl env`: the packaged environments installed here, and a task's settings and examples."""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(
    help="Packaged RL environments (env=NAME): the prompts and their scoring in one.",
    epilog="""\
\b
Examples:
  trainctl env ls                         the kinds installed here, and their tasks
  trainctl env show spell_backward        a task's settings and examples, scored
  trainctl train recipe=grpo-arith-tiny-cpu env=reasoning_gym env.tasks=[spell_backward,basic_arithmetic]
""",
    no_args_is_help=True,
)


@app.command(
    epilog="""\
\b
Examples:
  trainctl env ls
  trainctl train recipe=grpo-arith-tiny-cpu env=reasoning_gym env.tasks=[spell_backward,basic_arithmetic]
"""
)
def ls() -> None:
    """The environment kinds, whether each is installed, and the tasks each offers."""
    from trainctl.envs import KINDS, kind_module

    for kind in KINDS:
        module = kind_module(kind)
        tasks = module.tasks()
        if not tasks:
            typer.echo(f"{kind}: not installed ({module.INSTALL})")
            continue
        typer.echo(f"{kind}: {len(tasks)} tasks (env={kind} env.tasks=[NAME,...]; trainctl env show NAME)")
        width = max(map(len, tasks)) + 2
        per_line = max(1, 110 // width)
        for i in range(0, len(tasks), per_line):
            typer.echo("  " + "".join(t.ljust(width) for t in tasks[i : i + per_line]).rstrip())


@app.command(
    epilog="""\
\b
Examples:
  trainctl env show spell_backward
  trainctl env show basic_arithmetic -n 5 --seed 1
"""
)
def show(
    task: Annotated[str, typer.Argument(help="a task's name (trainctl env ls)")],
    n: Annotated[int, typer.Option("-n", help="examples to generate", min=0)] = 3,
    seed: Annotated[int, typer.Option("--seed", help="the generator's seed")] = 0,
) -> None:
    """A task's settings (with their defaults) and a few generated examples, each with its answer scored."""
    from trainctl.envs.reasoning_gym import describe

    d = describe(task, n, seed)
    typer.echo(f"{task} (reasoning_gym): settings, as env.tasks=[{{name:{task},settings:{{FIELD:VALUE}}}}]")
    for name, default in d.settings.items():
        typer.echo(f"  {name}: {default!r}")
    if d.curriculum is None:
        typer.echo("Curriculum: none (env.curriculum cannot move it)")
    else:
        typer.echo("Curriculum (env.curriculum.enabled=true): the settings it sets, level 0, 1, ...")
        for name, values in d.curriculum.items():
            typer.echo(f"  {name}: {', '.join(map(str, values))}")
    for i, ex in enumerate(d.examples, 1):
        typer.echo(f"\nExample {i}:\n  question: {ex.question}\n  answer:   {ex.answer}")
        typer.echo(f"  scored:   {ex.right:g} for <answer>{ex.answer}</answer>, {ex.untagged:g} without the tag")
