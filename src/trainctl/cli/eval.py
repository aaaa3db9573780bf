"""`trainctl eval`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from trainctl.cli.common import ConfigDirs, Overrides, command_overrides, render_warnings

EPILOG = """\
\b
Examples:
  trainctl eval tiny                                       a model option, on data=arith's test split, greedy
  trainctl eval qwen2.5-7b data=gsm8k hardware=1gpu        generated with vLLM on a GPU
  trainctl eval runs/grpo                                  a run's latest checkpoint, with the run's data and reward
  trainctl eval runs/grpo --each-checkpoint                every checkpoint (and the base model): best marked
  trainctl eval runs/grpo/checkpoints/global_step_40 n=8 temperature=0.7    pass@1, 2, 4 and 8
  trainctl eval ./my-model data=gsm8k --limit 100 --out evals/mine
  trainctl eval runs/agent --each-checkpoint                a run with tools: verl's tool agent loop, its calls
  trainctl eval tiny-tools data=arith-tools tools=calculator n=4 temperature=1    an agent, pass@1..4
  then: trainctl ckpt best runs/grpo --metric eval/arith/acc
\b
Sampling settings (key=value among the overrides; defaults are what training's validation uses):
  n, k, temperature, top_p, top_k, max_tokens, seed, threshold
"""


def eval_command(
    ctx: typer.Context,
    model: Annotated[
        str,
        typer.Argument(
            help="a model option (trainctl model ls), a Hugging Face folder, a run folder, or one checkpoint",
            show_default=False,
        ),
    ],
    overrides: Overrides = None,
    each_checkpoint: Annotated[
        bool, typer.Option("--each-checkpoint", help="score every checkpoint of the run, one row per step")
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="where samples and metrics go (default: <run>/eval, else ./eval/<model>)"),
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="score only the first N test prompts")] = None,
    no_base: Annotated[
        bool, typer.Option("--no-base", help="with --each-checkpoint: skip the model the run started from")
    ] = False,
    config_dir: ConfigDirs = None,
) -> None:
    """Score a model, a run or a checkpoint on the data's test split with the reward training uses.

    Writes eval/<data>/... metrics where `trainctl ckpt ls -m` and `ckpt best --metric` read them, and every sample
    (prompt, response, reward, ground truth) as JSON lines.
    Exit codes: 0 scored, 1 a problem with the model, data, reward or settings (nothing generated), 2 a usage error,
    130 interrupted.
    """
    from trainctl.eval.core import mark_best, prepare

    words, search = command_overrides(ctx, overrides, config_dir)
    p = prepare(model, words, each_checkpoint=each_checkpoint, out=out, limit=limit, base=not no_base, search=search)
    render_warnings(p.warnings)
    for note in p.notes:
        typer.echo(f"Note: {note}", err=True)
    rows = len(p.rows)
    typer.echo(
        f"Scoring {len(p.targets)} model{'s' if len(p.targets) != 1 else ''} on {rows} prompts of {p.val_file} "
        f"({p.sampling.describe()}; reward={p.plan.cfg.reward.name}; engine {p.engine})",
        err=True,
    )
    results = []
    for target in p.targets:
        with _progress(f"{target.label}") as progress:
            result = _evaluate(p, target, progress)
        typer.echo(
            f"  {target.label}: {result.tokens} tokens generated in {result.seconds:.1f} s "
            f"({result.tokens_per_s:.0f} tokens/s)",
            err=True,
        )
        results.append(result)
    mark_best(results, f"{p.prefix}/acc")
    _table(p, results)
    typer.echo(f"Samples and metrics: {p.out_dir}", err=True)


def _evaluate(p, target, progress):
    from transformers.utils import logging as hf_logging

    from trainctl.eval.core import evaluate

    hf_logging.disable_progress_bar()  # transformers' "Loading weights" bar would cut through ours
    return evaluate(p, target, progress)


def _progress(label: str):
    """A progress bar of finished samples on a terminal; nothing when piped."""
    import contextlib

    if not sys.stderr.isatty():
        return contextlib.nullcontext(None)

    @contextlib.contextmanager
    def bar():
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        columns = [TextColumn(f"generating {label}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
        with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
            task = progress.add_task(label, total=None)

            def update(done: int, total: int) -> None:
                progress.update(task, completed=done, total=total)

            yield update

    return bar()


def _table(p, results) -> None:
    from rich.table import Table

    from trainctl.cli.common import stdout_console

    prefix = p.prefix
    ks = [k for k in p.sampling.ks if p.sampling.n > 1]
    table = Table(box=None, header_style="bold", pad_edge=False, title=f"{prefix} (n={p.sampling.n})")
    formats = any(f"{prefix}/format" in r.metrics for r in results)
    columns = ["model", "prompts", "acc", *[f"pass@{k}" for k in ks], "reward", *(["format"] if formats else [])]
    agent = any(f"{prefix}/turns" in r.metrics for r in results)  # the tool agent loop ran: its turns and calls
    columns += [*(["turns", "calls", "tool errors"] if agent else []), "resp len", "truncated", ""]
    for col in columns:
        table.add_column(col, justify="left" if col in ("model", "") else "right")
    metric = f"{prefix}/acc"
    best_value = next((r.metrics[metric] for r in results if r.best), None)
    tied = sum(r.target.checkpoint is not None and r.metrics.get(metric) == best_value for r in results) > 1
    for r in results:
        m = r.metrics
        cells = [
            r.target.label,
            str(r.prompts),
            f"{m[f'{prefix}/acc']:.4f}",
            *[f"{m.get(f'{prefix}/pass@{k}', float('nan')):.4f}" for k in ks],
            f"{m[f'{prefix}/reward']:.4f}",
            *([f"{m.get(f'{prefix}/format', float('nan')):.0%}"] if formats else []),
            *(
                [
                    f"{m[f'{prefix}/turns']:.2f}",
                    f"{m[f'{prefix}/tool/calls_per_trajectory']:.2f}",
                    f"{m[f'{prefix}/tool/error_share']:.0%}",
                ]
                if agent
                else []
            ),
            f"{m[f'{prefix}/response_length']:.1f}",
            f"{m[f'{prefix}/truncated']:.0%}",
            ("<- best (tied: the earliest, as ckpt best picks)" if tied else "<- best") if r.best else "",
        ]
        table.add_row(*cells)
    console = stdout_console()
    console.print(table)
    # per data_source (the file mixes sources): eval/<data>/<data_source>/acc; a data_source may contain "/"
    sources = sorted({k[len(prefix) + 1 : -len("/acc")] for r in results for k in r.metrics if k.endswith("/acc")})
    sources = [s for s in sources if s]
    for r in results if sources else []:
        parts = [f"{s} {r.metrics[f'{prefix}/{s}/acc']:.4f}" for s in sources if f"{prefix}/{s}/acc" in r.metrics]
        console.print(f"  {r.target.label}, acc by data_source: " + "; ".join(parts))
