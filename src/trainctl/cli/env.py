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
  trainctl env install verifiers          verifiers' own interpreter (env=verifiers needs it)
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
        if hasattr(module, "status"):
            typer.echo(module.status())
            continue
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
  trainctl env show verifiers:my_taskset:tasksets      a verifiers taskset in ./tasksets
"""
)
def show(
    task: Annotated[str, typer.Argument(help="a task's name (trainctl env ls)")],
    n: Annotated[int, typer.Option("-n", help="examples to generate", min=0)] = 3,
    seed: Annotated[int, typer.Option("--seed", help="the generator's seed")] = 0,
) -> None:
    """A task's settings (with their defaults) and a few generated examples, each with its answer scored; for a
    verifiers taskset (verifiers:MODULE, or verifiers:MODULE:FOLDER to import it from a folder), its rewards and
    first prompts."""
    if task.startswith("verifiers:"):
        _show_taskset(task.removeprefix("verifiers:"), n)
        return
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


@app.command(
    epilog="""\
\b
Examples:
  trainctl env install verifiers --dry-run     what it would make, and where
  trainctl env install verifiers               <home>/envs/verifiers-0.4.0 (about a minute)
  trainctl env install verifiers --with ./my_taskset   a taskset package installed there too
"""
)
def install(
    kind: Annotated[str, typer.Argument(help="the environment kind whose interpreter to make: verifiers")],
    path: Annotated[
        str | None,
        typer.Option("--path", help="where (default: $TRAINCTL_VERIFIERS_VENV, else <home>/envs/verifiers-VERSION)"),
    ] = None,
    with_: Annotated[
        list[str] | None, typer.Option("--with", help="another pip requirement to install there (repeatable)")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="say what it would run, and run nothing")] = False,
) -> None:
    """Make an environment kind's own interpreter (verifiers: a virtual environment with verifiers, whose pins
    trainctl's cannot share), once; plans find it there."""
    from pathlib import Path

    from trainctl.envs import verifiers
    from trainctl.errors import TrainctlError

    if kind != "verifiers":
        raise TrainctlError(
            f"{kind!r} needs no interpreter of its own: only verifiers does.", hint="trainctl env install verifiers"
        )
    # where plans look first: $TRAINCTL_VERIFIERS_VENV when set (one made there already is kept), else the home's
    target = Path(path).expanduser().absolute() if path else verifiers.candidates()[0].absolute()
    if dry_run:
        state = "installed" if verifiers.ready(target) else "not installed"
        typer.echo(f"verifiers {verifiers.VERSION} at {target}: {state}; `trainctl env install verifiers` would run:")
        for what, argv in verifiers.install_steps(target, list(with_ or [])):
            typer.echo(f"  {what}:\n    {' '.join(argv)}")
        return
    verifiers.install(target, list(with_ or []), say=lambda line: typer.echo(line, err=True))
    if path and target not in verifiers.candidates():
        typer.echo(f"Plans find it with: export {verifiers.VENV_VAR}={target}", err=True)


def _show_taskset(task: str, n: int) -> None:
    from trainctl.envs.verifiers import describe, toolset_problems

    shown = describe(task, n)
    d = shown["description"]
    typer.echo(f"{task.split(':')[0]} (verifiers): {d['taskset']} of {d['task']}, from {d['module']}")
    for kind in ("rewards", "metrics"):
        for fn in d[kind]:
            weight = f" weight {fn['weight']:g}" if "weight" in fn else ""
            needs = (
                " (needs a runtime: refused)" if fn["runtime"] else " (a plain function: refused)" if fn["sync"] else ""
            )
            typer.echo(f"  {kind[:-1]} {fn['name']}{weight}{needs}")
    for t in d["toolsets"]:
        refused = [p.message.split(") ", 1)[-1] for p in toolset_problems(d["task"], t)]
        verdict = "refused: it " + "; it ".join(refused) if refused else "tools=verifiers serves it"
        typer.echo(f"  toolset {t['class']} ({t['scope']} scope; {verdict})")
    for what in ("judges", "needs"):
        if d[what]:
            typer.echo(f"  {what}: {', '.join(d[what])} (refused)")
    for i, t in enumerate(shown["tasks"], 1):
        typer.echo(f"\nTask {i}:")
        for m in t["messages"]:
            typer.echo(f"  {m['role']}: {m['content']}")
