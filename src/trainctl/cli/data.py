"""`trainctl data ...`: the datasets the `data` group names, in each trainer's format."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Annotated

import typer

from trainctl.cli.common import OVERRIDE_CONTEXT, Overrides, command_overrides

app = typer.Typer(
    help="Data: prepare, convert and check datasets in the format each trainer reads.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@contextlib.contextmanager
def progress_bar(label: str, total: int | None = None):
    """A callback advancing a progress bar on a terminal (nothing when output is redirected)."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = [SpinnerColumn(), TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)


@app.command(
    epilog="""\
\b
Examples:
  trainctl data prep arith                            generate the embedded default dataset
  trainctl data prep gsm8k                            from the Hugging Face hub, into rl/ and sft/
  trainctl data prep gsm8k --from ~/mirror/gsm8k      from a local copy (train*/test* files), offline
  trainctl data prep hh-rlhf --limit 1000             the first 1000 rows of each split
"""
)
def prep(
    name: Annotated[
        str, typer.Argument(help="a data group option: arith, gsm8k, math, hh-rlhf, ultrafeedback, alpaca")
    ],
    from_: Annotated[
        Path | None, typer.Option("--from", help="a local copy: a file, or a folder of train*/test* files")
    ] = None,
    source: Annotated[str, typer.Option("--source", help="hf or modelscope")] = "hf",
    out: Annotated[Path | None, typer.Option("--out", help="where to write (default: the data group's dir)")] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="at most this many rows per split", min=1)] = None,
) -> None:
    """Write a dataset's train and test parquet files, in every format its data option lists."""
    from trainctl.data.prep import prepare

    with progress_bar(f"preparing {name}") as advance:
        summary = prepare(name, from_, source, out, limit, progress=advance)
    for line in summary.lines():
        typer.echo(line)


@app.command(
    epilog="""\
\b
Examples:
  trainctl data convert qa.jsonl --to rl --out qa.parquet --data-source openai/gsm8k
  trainctl data convert chats.json --to sft --out chats.parquet
  trainctl data convert pairs.csv --to dpo --out pairs.parquet --prompt-col question --chosen-col good \\
      --rejected-col bad
\b
Shapes it recognises: messages; prompt/response (or completion); question/answer;
instruction/input/output (Alpaca); conversations with from/value (ShareGPT); prompt/chosen/rejected.
"""
)
def convert(
    input: Annotated[Path, typer.Argument(help="a .jsonl, .json, .csv or .parquet file")],
    to: Annotated[str, typer.Option("--to", help="rl, sft or dpo")],
    out: Annotated[Path, typer.Option("--out", help="the parquet file to write")],
    data_source: Annotated[
        str | None, typer.Option("--data-source", help="RL: the data_source verl picks the reward function by")
    ] = None,
    instruction: Annotated[str | None, typer.Option("--instruction", help="RL: text appended to every prompt")] = None,
    ability: Annotated[str | None, typer.Option("--ability", help="RL: the ability column (default math)")] = None,
    split: Annotated[str, typer.Option("--split", help="RL: extra_info.split")] = "train",
    limit: Annotated[int | None, typer.Option("--limit", help="at most this many rows", min=1)] = None,
    messages_col: Annotated[str | None, typer.Option("--messages-col", help="the column of chat messages")] = None,
    prompt_col: Annotated[str | None, typer.Option("--prompt-col", help="the prompt (or question) column")] = None,
    response_col: Annotated[str | None, typer.Option("--response-col", help="the response (or answer) column")] = None,
    chosen_col: Annotated[str | None, typer.Option("--chosen-col", help="the preferred response column")] = None,
    rejected_col: Annotated[str | None, typer.Option("--rejected-col", help="the rejected response column")] = None,
) -> None:
    """Turn your own JSONL, JSON, CSV or parquet file into the format a trainer reads (rl, sft or dpo)."""
    from trainctl.data.convert import convert as run

    mapping = {
        "messages_col": messages_col,
        "prompt_col": prompt_col,
        "response_col": response_col,
        "chosen_col": chosen_col,
        "rejected_col": rejected_col,
    }
    with progress_bar(f"converting {input.name}") as advance:
        summary = run(input, to, out, data_source, mapping, instruction, ability, split, limit, progress=advance)
    typer.echo(f"detected: {summary.shape.describe()}")
    for line in summary.lines():
        typer.echo(line)


@app.command(
    context_settings=OVERRIDE_CONTEXT,
    epilog="""\
\b
Examples:
  trainctl data check ~/.trainctl/data/gsm8k/rl/train.parquet
  trainctl data check mine.parquet algorithm=grpo model=qwen2.5-7b data.max_prompt_length=1024
""",
)
def check(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="the data file to check")],
    overrides: Overrides = None,
) -> None:
    """Prove a data file will work: schema, reward coverage, ground truths, token lengths, duplicates.

    Exit 1 when training on it would fail.
    """
    from rich.table import Table

    from trainctl.cli.common import render_warnings, stdout_console
    from trainctl.errors import ConfigProblems
    from trainctl.plan import check_data_file

    words, search = command_overrides(ctx, overrides)
    with progress_bar(f"checking {file.name}") as advance:
        report = check_data_file(file, words, search, progress=advance)
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_row("file", str(report.path))
    table.add_row("format", f"{report.fmt} ({report.rows} rows)")
    if report.fmt == "rl":
        for source, n in report.sources.most_common():
            from trainctl.data.check import scored

            table.add_row("data_source", f"{source}: {n} rows, {'scored by verl' if scored(source) else 'no scorer'}")
    if report.lengths:
        lengths = sorted(report.lengths)
        how = f"tokenizer of {report.tokenizer}" if report.tokenizer else "estimated, no tokenizer on disk"
        table.add_row(
            "tokens",
            f"min {lengths[0]}, median {lengths[len(lengths) // 2]}, max {lengths[-1]} ({how}); "
            f"limit {report.limit_key} = {report.limit}, {report.over} over",
        )
        top = max(c for _, c in report.histogram()) or 1
        for label, count in report.histogram():
            table.add_row("", f"{label:>8}  {'#' * round(24 * count / top):<24} {count}")
    table.add_row("duplicates", str(report.duplicates))
    stdout_console().print(table)
    render_warnings(report.warnings)
    if report.problems:
        raise ConfigProblems(report.problems)
    typer.echo("OK: ready to train on.")


@app.command(
    "ls",
    epilog="""\
\b
Example:
  trainctl data ls        then: trainctl data prep NAME for any shown as -/-
""",
)
def ls() -> None:
    """The datasets the data group knows: formats, what is prepared here, rows and size."""
    from rich.table import Table

    from trainctl.cli.common import stdout_console
    from trainctl.data.catalog import catalog

    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("data", "prepared here (train/test rows)", "size", "folder"):
        table.add_column(col)
    for e in catalog():
        parts = []
        for fmt, splits in e.prepared.items():
            rows = "/".join("-" if n is None else str(n) for n in splits.values())
            parts.append(f"{fmt} {rows}")
        size = f"{e.size_bytes / 2**20:.1f} MiB" if e.size_bytes else "-"
        table.add_row(e.name, ", ".join(parts), size, e.dir)
    stdout_console().print(table)
