"""`trainctl eval`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from trainctl.cli.common import ConfigDirs, Overrides, command_overrides, render_warnings, tethered
from trainctl.errors import UsageError

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
  trainctl eval runs/rm --each-checkpoint                   a reward model: held-out pair accuracy, no generation
  then: trainctl ckpt best runs/grpo --metric eval/arith/acc
\b
Standard benchmarks with lm-evaluation-harness (lm-eval's hf model in this process; vLLM's on GPUs):
  trainctl eval runs/grpo --tasks arc_easy,hellaswag --each-checkpoint    lm-eval's tasks, on every checkpoint
  trainctl eval tiny --tasks my_mc,my_gen --include-path my_tasks/        task YAMLs of your own (offline)
  trainctl eval ./my-model --tasks gsm8k --num-fewshot 5 --limit 100 --batch-size 8
  then: trainctl ckpt best runs/grpo --metric eval/arc_easy/acc
\b
Sampling settings (key=value among the overrides; defaults are what training's validation uses):
  n, k, temperature, top_p, top_k, max_tokens, seed, threshold
"""


@tethered
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
    limit: Annotated[
        int | None, typer.Option("--limit", help="score only the first N test prompts (with --tasks: N per task)")
    ] = None,
    no_base: Annotated[
        bool, typer.Option("--no-base", help="with --each-checkpoint: skip the model the run started from")
    ] = False,
    tasks: Annotated[
        str | None,
        typer.Option(
            "--tasks",
            help="lm-eval tasks, groups or tags, comma-separated: standard benchmarks (lm-evaluation-harness) "
            "instead of the data's test split",
            show_default=False,
        ),
    ] = None,
    include_path: Annotated[
        Path | None,
        typer.Option(
            "--include-path", help="with --tasks: a folder of task YAML files of your own", show_default=False
        ),
    ] = None,
    num_fewshot: Annotated[
        int | None,
        typer.Option("--num-fewshot", help="with --tasks: examples before each question (default: the task's)"),
    ] = None,
    batch_size: Annotated[
        str | None,
        typer.Option("--batch-size", help="with --tasks: requests per forward pass, or auto (default: 1; vLLM: auto)"),
    ] = None,
    config_dir: ConfigDirs = None,
) -> None:
    """Score a model, a run or a checkpoint on the data's test split with the reward training uses, or on standard
    benchmarks with lm-evaluation-harness (--tasks).

    Writes eval/<data>/... metrics (with --tasks: eval/<task>/<metric>) where `trainctl ckpt ls -m`,
    `ckpt best --metric` and `runs show` read them, and every sample as JSON lines (with --tasks: lm-eval's own
    results and samples files, in <out>/lm-eval/).
    Exit codes: 0 scored, 1 a problem with the model, data, reward, tasks or settings (nothing generated), 2 a usage
    error, 130 interrupted.
    """
    from trainctl import scratch as temporary

    words, search = command_overrides(ctx, overrides, config_dir)
    # the temporary files of what it runs in this process (vLLM's rendezvous file) and starts (tool servers) in a
    # folder of its own under trainctl's cache, removed at the end (trainctl.scratch)
    with temporary.for_this_process():
        _eval(model, words, search, each_checkpoint, out, limit, no_base, tasks, include_path, num_fewshot, batch_size)


def _eval(model, words, search, each_checkpoint, out, limit, no_base, tasks, include_path, num_fewshot, batch_size):
    from trainctl.eval.core import mark_best, prepare

    if tasks is not None:
        _harness(model, words, search, tasks, include_path, num_fewshot, limit, batch_size,
                 each_checkpoint, out, not no_base)  # fmt: skip
        return
    for flag, value in (("--include-path", include_path), ("--num-fewshot", num_fewshot), ("--batch-size", batch_size)):
        if value is not None:
            raise UsageError(
                f"{flag} goes with --tasks (lm-evaluation-harness's tasks).",
                hint=f"trainctl eval {model} --tasks TASK {flag} ...",
            )
    from trainctl.eval import pairs

    if pairs.is_reward_model(model, search):  # it scores answers: held-out pair accuracy
        _pairs(model, words, search, each_checkpoint, out, limit, not no_base)
        return
    p = prepare(model, words, each_checkpoint=each_checkpoint, out=out, limit=limit, base=not no_base, search=search)
    render_warnings(p.warnings)
    for note in p.notes:
        typer.echo(f"Note: {note}", err=True)
    from trainctl.cli.ckpt import say_passed_over

    for target in p.targets[-1:]:
        if target.checkpoint is not None:
            say_passed_over(target.checkpoint)
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


def _pairs(model, words, search, each_checkpoint, out, limit, base) -> None:
    """`eval` of a reward model: each test pair scored once, a table of pair accuracy and margin per model."""
    from rich.table import Table
    from transformers.utils import logging as hf_logging

    from trainctl.cli.common import stdout_console
    from trainctl.eval import pairs

    p = pairs.prepare(model, words, each_checkpoint=each_checkpoint, out=out, limit=limit, base=base, search=search)
    render_warnings(p.warnings)
    hf_logging.disable_progress_bar()  # transformers' "Loading weights" bar would cut through ours
    for note in p.notes:
        typer.echo(f"Note: {note}", err=True)
    n = len(p.targets)
    typer.echo(f"Scoring {n} reward model{'s' if n != 1 else ''} on {len(p.rows)} pairs of {p.val_file}", err=True)
    results = []
    for target in p.targets:
        with _progress(target.label, "scoring") as progress:
            results.append(pairs.evaluate(p, target, progress))
    accuracy, margin = f"{p.prefix}/{pairs.ACCURACY}", f"{p.prefix}/{pairs.MARGIN}"
    pairs.mark_best(results, accuracy)
    table = Table(box=None, header_style="bold", pad_edge=False, title=f"{p.prefix} (reward model)")
    for col in ("model", "pairs", "pair accuracy", "margin", ""):
        table.add_column(col, justify="left" if col in ("model", "") else "right")
    for r in results:
        table.add_row(r.target.label, str(r.pairs), f"{r.metrics[accuracy]:.4f}", f"{r.metrics[margin]:.4f}",
                      "<- best" if r.best else "")  # fmt: skip
    stdout_console().print(table)
    typer.echo(f"Scores and metrics: {p.out_dir}", err=True)


def _harness(model, words, search, tasks, include_path, num_fewshot, limit, batch_size, each_checkpoint, out, base):
    """`eval --tasks`: lm-eval on each target (its own bars show the requests), then a table of the metrics."""
    from trainctl.eval import harness

    typer.echo("Finding the tasks and loading their datasets (lm-eval)", err=True)
    p = harness.prepare(model, words, tasks, include_path=include_path, num_fewshot=num_fewshot, limit=limit,
                        batch_size=batch_size, each_checkpoint=each_checkpoint, out=out, base=base,
                        search=search)  # fmt: skip
    render_warnings(p.warnings)
    how = f"lm-eval's {p.engine} model" + (f" on {p.device}" if p.engine == "hf" else "")
    extra = "".join([f", {p.num_fewshot}-shot" if p.num_fewshot is not None else "",
                     f", the first {p.limit} per task" if p.limit else ""])  # fmt: skip
    n, tasks = len(p.targets), p.leaf_tasks
    named = ", ".join(tasks) if len(tasks) <= 6 else f"{len(tasks)} tasks ({', '.join(tasks[:4])}, ...)"
    typer.echo(f"Evaluating {n} model{'s' if n != 1 else ''} on {named} ({how}, batch size {p.batch_size}{extra})",
               err=True)  # fmt: skip
    results = []
    for target in p.targets:
        typer.echo(f"  {target.label}:", err=True)
        result = harness.evaluate(p, target)
        shown = ", ".join(
            f"{k.removeprefix('eval/')} {result.metrics[k]:.4f}" for k in harness.headline(result.metrics)
        )
        typer.echo(f"  {target.label}: {shown} ({result.seconds:.1f} s)", err=True)
        results.append(result)
    _harness_table(results)
    typer.echo(
        f"Metrics: {p.out_dir / 'metrics.jsonl'}; lm-eval's results and samples: {p.out_dir / 'lm-eval'}", err=True
    )
    typer.echo(f"The same with lm-eval's CLI: {p.command(results[-1].folder)}", err=True)


def _harness_table(results) -> None:
    """One row per metric, one column per model; with several checkpoints, the one `ckpt best` would pick."""
    from rich.table import Table

    from trainctl.cli.common import stdout_console
    from trainctl.eval.harness import best_of, headline

    metrics = list(dict.fromkeys(k for r in results for k in headline(r.metrics)))
    several = sum(r.target.checkpoint is not None for r in results) > 1
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("metric")
    for r in results:
        table.add_column(r.target.label, justify="right")
    if several:
        table.add_column("best (ckpt best)")
    for metric in metrics:
        cells = [f"{r.metrics[metric]:.4f}" if metric in r.metrics else "-" for r in results]
        if several:
            best = best_of(results, metric)
            cells.append(best.target.label if best else "")
        table.add_row(metric, *cells)
    stdout_console().print(table)


def _evaluate(p, target, progress):
    from transformers.utils import logging as hf_logging

    from trainctl.eval.core import evaluate

    hf_logging.disable_progress_bar()  # transformers' "Loading weights" bar would cut through ours
    return evaluate(p, target, progress)


def _progress(label: str, doing: str = "generating"):
    """A progress bar of finished samples on a terminal; nothing when piped."""
    import contextlib

    if not sys.stderr.isatty():
        return contextlib.nullcontext(None)

    @contextlib.contextmanager
    def bar():
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        columns = [TextColumn(f"{doing} {label}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
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
