"""`trainctl train`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trainctl.cli.common import ConfigDirs, DryRun, Overrides, command_overrides, render_warnings
from trainctl.errors import RunFailed, RunInterrupted, TrainctlError

EPILOG = """\
\b
Examples:
  trainctl train recipe=quickstart
      the embedded default: tiny model, arith data, SFT on CPU
  trainctl train algorithm=grpo model=qwen2.5-7b data=gsm8k hardware=8gpu logger=wandb --dry-run
      compose groups, check everything, print the plan; nothing starts
  trainctl train algorithm=grpo actor_rollout_ref.actor.optim.lr=5e-7 data.train_batch_size=512 --dry-run
      any backend key, written as in verl's own docs
  trainctl train -m algorithm=grpo,dapo model=qwen2.5-7b,qwen3-8b --dry-run
      a sweep: one plan per combination
  trainctl train --resume runs/quickstart
      continue a run from its last checkpoint, with its saved config
"""


def train(
    ctx: typer.Context,
    overrides: Overrides = None,
    dry_run: DryRun = False,
    multirun: Annotated[
        bool, typer.Option("-m", "--multirun", help="sweep: key=a,b runs one plan per value (the product of all)")
    ] = False,
    resume: Annotated[
        Path | None,
        typer.Option("--resume", help="continue the run in this folder from its last checkpoint", show_default=False),
    ] = None,
    detach: Annotated[
        bool,
        typer.Option(
            "--detach",
            help="run in the background: print the run folder and return; the run goes on when this terminal "
            "closes (follow it: runs show NAME --follow; stop it: runs stop NAME). A Ray job is submitted and not "
            "followed",
        ),
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            "-v",
            help="stream the trainer's whole output here instead of the live view (it is always "
            "in runs/NAME/logs/attempt-N.log)",
        ),
    ] = False,
    config_dir: ConfigDirs = None,
) -> None:
    """Compose a config from groups, check it, and run it (or print the plan with --dry-run).

    Exit codes: 0 done, 1 a problem with the config, data or model (nothing started), 2 a usage error,
    3 the trainer failed, 130 interrupted.
    """
    from trainctl.cli.common import checked_plan
    from trainctl.cli.render import plan_text
    from trainctl.config.overrides import expand

    words, search = command_overrides(ctx, overrides, config_dir)
    # a detached trainctl is given the same command, less --detach (a sweep's: each point's overrides)
    dirs = [f"--config-dir={d}" for d in config_dir or []]
    resume_args = ["--resume", str(resume), *words, *dirs] if resume is not None else []
    if resume is not None:
        words = [*_saved_args(resume), *words]
    points = expand(words, multirun, search)
    if resume is not None and len(points) > 1:
        raise TrainctlError("--resume continues one run; it cannot be combined with a sweep (-m).")
    failures: list[TrainctlError] = []
    for i, point in enumerate(points, 1):
        plan = checked_plan(point, search, launching=not dry_run)
        args = [o.raw for o in point]
        title = f"Sweep point {i}/{len(points)}: {' '.join(args)}" if multirun else None
        render_warnings(plan.warnings)
        if dry_run:
            typer.echo(plan_text(plan, title))
            continue
        if title:
            typer.echo(title)
        if resume is not None and plan.run_dir != resume.expanduser().resolve():
            raise TrainctlError(
                f"--resume {resume}: the overrides move the run to {plan.run_dir}.",
                hint="do not change run.name or run.dir when resuming",
            )
        try:
            if detach and _runs_here(plan) and not _queues(plan):
                _run_detached(plan, resume_args or [*args, *dirs])
                continue
            _run(plan, args, resume is not None, detach, verbose)
        except RunFailed as e:
            if len(points) == 1:
                raise
            failures.append(e)
    if dry_run:
        typer.echo("Dry run: nothing was started.")
    elif failures:
        raise RunFailed(f"{len(failures)} of {len(points)} sweep runs failed.", details=[f.message for f in failures])


def _runs_here(plan) -> bool:
    """Whether the run's supervisor is this machine's trainctl (a Ray job's is its cluster)."""
    from trainctl import launchers

    return launchers.get(plan.cfg.hardware.launcher).ray != "inside"


def _queues(plan) -> bool:
    """Whether a scheduler holds the run (Slurm): detached, it is submitted and left there."""
    from trainctl import launchers

    return launchers.get(plan.cfg.hardware.launcher).queues


def _run_detached(plan, train_args: list[str]) -> None:
    from trainctl.launch.control import SUPERVISOR_LOG, start_detached
    from trainctl.launch.rundir import relative

    started = start_detached(train_args, plan.run_dir)
    folder = relative(started.run_dir)
    trainer = f", trainer PID {started.trainer_pid}" if started.trainer_pid else ""
    typer.echo(f"Started {plan.cfg.run.name} in the background (trainctl PID {started.pid}{trainer}): {folder}")
    typer.echo(f"  follow it: trainctl runs show {folder} --follow")
    typer.echo(f"  stop it:   trainctl runs stop {folder}")
    typer.echo(f"  its output: {folder}/{SUPERVISOR_LOG}")


def _saved_args(folder: Path) -> list[str]:
    from trainctl.launch.rundir import RunDir

    run = RunDir(folder.expanduser().resolve())
    if not run.exists():
        raise TrainctlError(
            f"--resume {folder}: no run there (no {run.run_file.name}).",
            hint="trainctl runs write their folder under runs/<run.name>/; pass that folder",
        )
    return list(run.status()["args"])


def _run(plan, args: list[str], resume: bool, detach: bool, verbose: bool) -> None:
    import contextlib
    import os
    import sys

    from trainctl.launch.checkpoints import latest_checkpoint
    from trainctl.launch.rundir import relative
    from trainctl.launch.runner import launch
    from trainctl.metrics import before_after, run_summary
    from trainctl.runs.keys import key_metrics

    typer.echo(f"Run {plan.cfg.run.name}: {plan.backend.title}, folder {relative(plan.run_dir)}", err=True)
    views = []

    def show(run, attempt) -> None:
        # the live view reads the run folder as it grows; the raw stream goes to the log only
        from trainctl.cli.live import RunView

        title = f"{plan.cfg.run.name} · {plan.cfg.algorithm.name} · {plan.backend.title}"
        views.append(RunView(run.path, attempt, plan.cfg.algorithm.family, title))
        views[-1].start()

    with contextlib.ExitStack() as stack:
        echo = sys.stdout
        if not verbose and not detach:
            echo = stack.enter_context(open(os.devnull, "w"))
            stack.callback(lambda: [v.stop() for v in views])
        result = launch(
            plan,
            args,
            resume=resume,
            detach=detach,
            echo=echo,
            notify=lambda n: typer.echo(f"Note: {n}", err=True),
            on_attempt=None if verbose or detach else show,
        )
    folder = relative(result.run_dir)
    if result.state == "submitted":
        if _runs_here(plan):  # a scheduler's queue (Slurm, a plugin's)
            typer.echo(f"Submitted {plan.cfg.run.name} ({result.job_id}); see it: trainctl runs show {folder}")
            typer.echo(f"  follow it: trainctl runs show {folder} --follow")
            typer.echo(f"  stop it:   trainctl runs stop {folder}")
        else:
            job = result.job_id
            typer.echo(f"Submitted Ray job {job}; follow it with: trainctl jobs logs {job} --follow")
        return
    if result.state == "interrupted":
        why = f" ({result.reason})" if result.reason else ""
        raise RunInterrupted(
            f"run {plan.cfg.run.name} was interrupted{why}; every process it started was stopped.",
            hint=f"continue it: trainctl train --resume {folder}",
        )
    if result.state == "failed":
        log = plan.run_dir / "logs"
        known = result.diagnosis
        what = f": {known[0]}" if known else ""
        fix = f"{known[1]}; " if known else ""
        if not known and result.resume_from:
            fix = f"the last whole checkpoint is {result.resume_from}; "
        raise RunFailed(
            f"the trainer exited with code {result.exit_code}{what}. Last lines of its log:",
            details=["  " + line for line in result.tail[-20:]],
            hint=f"{fix}the whole log is in {relative(log)}/; after fixing, resume: trainctl train --resume {folder}",
        )
    ckpt = latest_checkpoint(result.run_dir / "checkpoints")
    typer.echo(f"Finished {plan.cfg.run.name} in {result.seconds:.0f} s. Run folder: {folder}")
    if ckpt:
        typer.echo(f"Latest checkpoint: {relative(ckpt)}")
    for line in run_summary(result.run_dir, key_metrics(plan.cfg.algorithm.family)):
        typer.echo(line)
    changed = before_after(result.run_dir)
    if changed:
        typer.echo("Held-out, before -> after:")
        for line in changed:
            typer.echo(f"  {line}")
