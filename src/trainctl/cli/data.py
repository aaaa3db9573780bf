"""`trainctl data ...`: the datasets the `data` group names, in each trainer's format."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trainctl.cli.common import OVERRIDE_CONTEXT, ConfigDirs, Overrides, command_overrides, progress_bar

app = typer.Typer(
    help="Data: prepare, convert and check datasets in the format each trainer reads.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


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
  trainctl data convert pairs.jsonl --to kto --out kto.parquet    two rows a pair: chosen desirable, rejected not
\b
Shapes it recognises: messages; prompt/response (or completion); question/answer;
instruction/input/output (Alpaca); conversations with from/value (ShareGPT); prompt/chosen/rejected;
prompt/completion/label (KTO's unpaired rows).
"""
)
def convert(
    input: Annotated[Path, typer.Argument(help="a .jsonl, .json, .csv or .parquet file")],
    to: Annotated[str, typer.Option("--to", help="rl, sft, dpo or kto")],
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
    """Turn your own JSONL, JSON, CSV or parquet file into the format a trainer reads (rl, sft, dpo or kto)."""
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


@app.command(
    "gen-tasks",
    context_settings=OVERRIDE_CONTEXT,
    epilog="""\
\b
Examples:
  trainctl data gen-tasks my-tasks tools=calculator --url https://api.openai.com/v1 \\
      --generator gpt-4.1-mini --key-env OPENAI_API_KEY -n 200
  trainctl data gen-tasks web-tasks tools.servers_file=mcp.json --url http://127.0.0.1:8000/v1 \\
      --generator Qwen/Qwen2.5-7B-Instruct                      a vLLM server of your own
  trainctl data gen-tasks my-tasks tools=calculator --generator qwen2.5-7b     served here, on 127.0.0.1
  then: trainctl train algorithm=grpo data=my-tasks tools=calculator reward=judge reward.judge=... reward.url=...
\b
Writes <data dir>/NAME/rl/{train,test}.parquet, NAME/gen-tasks.json (what was asked and kept) and the data option
./conf/data/NAME.yaml (or under --config-dir), so that data=NAME finds them.
Exit codes: 0 written, 1 a problem with the tools, the generator or its answers (nothing written), 2 a usage error.
""",
)
def gen_tasks(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="the data option to write (data=NAME)", show_default=False)],
    overrides: Overrides = None,
    n: Annotated[int, typer.Option("-n", help="distinct tasks wanted")] = 64,
    generator: Annotated[
        str | None,
        typer.Option("--generator", help="the model name the endpoint serves; without --url, a local model to serve"),
    ] = None,
    url: Annotated[str | None, typer.Option("--url", help="an OpenAI-compatible endpoint, e.g. .../v1")] = None,
    key_env: Annotated[
        str | None, typer.Option("--key-env", help="the environment variable holding the endpoint's key")
    ] = None,
    per_request: Annotated[int, typer.Option("--per-request", help="tasks asked for in one request")] = 8,
    max_requests: Annotated[
        int | None, typer.Option("--max-requests", help="requests at most (default: 3 x what N needs)")
    ] = None,
    test_share: Annotated[float, typer.Option("--test-share", help="the share of tasks in the test split")] = 0.1,
    seed: Annotated[int, typer.Option("--seed", help="the split's shuffle")] = 0,
    temperature: Annotated[float, typer.Option("--temperature", help="the generator's sampling temperature")] = 1.0,
    json_schema: Annotated[
        bool, typer.Option("--json-schema/--no-json-schema", help="ask for the answer's JSON schema")
    ] = True,
    instruction: Annotated[
        str | None, typer.Option("--instruction", help="appended to every task, e.g. how to give the answer")
    ] = None,
    config_dir: ConfigDirs = None,
) -> None:
    """Generate tasks for an agent from its tools' listing with an LLM: deduplicated, rated 1-5, split into train
    and test, written as RL rows for tools=... with reward=judge (no ground truth needed). Malformed answers from
    the generator are counted and skipped."""
    import shlex

    from trainctl.inference import gentasks as gen

    words, search = command_overrides(ctx, overrides, config_dir)
    settings = gen.Settings(
        n=n, per_request=per_request, max_requests=max_requests, test_share=test_share, seed=seed,
        temperature=temperature, json_schema=json_schema, instruction=instruction,
    )  # fmt: skip
    gen.check_settings(settings)
    endpoint = gen.endpoint(generator, url, key_env)  # checked before any server starts
    plan, schemas = gen.tool_schemas(words, search)
    typer.echo(f"Tools: {', '.join(s['function']['name'] for s in schemas)}", err=True)
    if endpoint is None:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # transformers' "Loading weights" bar is not ours to show
        endpoint = gen.start_local(generator, lambda line: typer.echo(line, err=True))
    typer.echo(f"Asking {endpoint.model} at {endpoint.url} for {n} tasks", err=True)
    try:
        with progress_bar("tasks kept", total=n) as advance:
            kept = [0]

            def progress(done: int, total: int) -> None:
                if advance is not None:
                    advance(done - kept[0])
                kept[0] = done

            tasks, report = gen.generate(endpoint, schemas, settings, progress)
    finally:
        endpoint.stop()
    conf = (config_dir[0] if config_dir else Path.cwd() / "conf").expanduser().resolve()
    options = {"-n": n, "--generator": generator, "--url": url, "--key-env": key_env, "--seed": seed}
    given = [str(x) for k, v in options.items() if v is not None for x in (k, v)]
    command = shlex.join(["trainctl", "data", "gen-tasks", name, *words, *given])  # names only: never a key
    written = gen.write(
        name, tasks, report, settings, data_root=Path(plan.cfg.paths.data).expanduser(), conf_dir=conf,
        describe_command=command, tool_words=" ".join(shlex.quote(w) for w in words if w.startswith("tools")),
    )  # fmt: skip
    r = written.report
    typer.echo(
        f"{r.kept} tasks kept of {n} wanted ({r.requests} requests, {r.failed_requests} failed; "
        f"{r.malformed_answers} malformed answers and {r.malformed_tasks} malformed tasks skipped; "
        f"{r.exact_duplicates} duplicates and {r.near_duplicates} near-duplicates dropped; {r.seconds:.1f} s)"
    )
    typer.echo(f"Split: {r.train} train, {r.test} test; {r.with_answer} with a known answer")
    typer.echo("Difficulty: " + ", ".join(f"{d}: {c}" for d, c in r.difficulty.items()))
    typer.echo("Tool coverage: " + ", ".join(f"{t} {c}" for t, c in r.tool_coverage.items()))
    never = [t for t, c in r.tool_coverage.items() if c == 0]
    if never:
        typer.echo(f"Warning: no task names {', '.join(never)}; ask for more tasks (-n) or another generator", err=True)
    typer.echo(f"Wrote {written.train_file.parent} and the data option {written.option}")
    tools = " ".join(shlex.quote(w) for w in words if w.startswith("tools")) or "tools=..."
    typer.echo(f"Next: trainctl train algorithm=grpo data={name} {tools} reward=judge reward.judge=... reward.url=...")
