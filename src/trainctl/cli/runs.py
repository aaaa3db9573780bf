"""`trainctl runs ...`: the runs under runs/, where each stands, and runs side by side."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    help="Runs: list them with their status, show one (or follow it live), stop one, read its logs, compare configs "
    "and metrics, plot metrics.",
    no_args_is_help=True,
    rich_markup_mode=None,
    epilog="""\
\b
Examples:
  trainctl runs ls                                  every run under ./runs: status, steps, key metric
  trainctl runs show quickstart --follow            the live view of a run started elsewhere
  trainctl runs stop quickstart                     stop a run started elsewhere (or detached)
  trainctl runs compare runs/a runs/b               the config keys that differ, metrics side by side
  trainctl runs plot runs/a runs/b -m train/loss -o loss.png
  trainctl runs rollouts agent --worst          an agent run's trajectories, turn by turn
""",
)

_Dir = Annotated[Path, typer.Option("--dir", help="the folder holding the run folders")]
_Run = Annotated[Path, typer.Argument(help="a run folder (runs/NAME), or its name under ./runs", show_default=False)]


def _when(info) -> str:
    return info.started.astimezone().strftime("%Y-%m-%d %H:%M") if info.started else "-"


def _status(info) -> str:
    return info.status + (f" ({info.detail})" if info.detail and info.status != "done" else "")


def _steps(info) -> str:
    if info.steps_total:
        return f"{info.steps_done}/{info.steps_total}"
    return str(info.steps_done) if info.steps_done else "-"


def _metric(info) -> str:
    from trainctl.runs.progress import fmt_value

    if not info.headline:
        return "-"
    name, value = info.headline
    return f"{name}={fmt_value(value)}"


@app.command(
    "ls",
    epilog="""\
\b
Examples:
  trainctl runs ls                     every run under ./runs, newest first
  trainctl runs ls --dir /data/runs    another folder of runs
""",
)
def ls(folder: _Dir = Path("runs")) -> None:
    """One row per run: algorithm, model, data, status (running, done, failed, interrupted, killed), steps,
    the latest key metric, duration and start. Ray-job runs ask their cluster's Jobs API."""
    from rich.table import Table

    from trainctl.cli.common import stdout_console
    from trainctl.runs.progress import fmt_seconds
    from trainctl.runs.status import list_runs

    infos = list_runs(folder)
    if not infos:
        typer.echo(f"No runs in {folder}. Start one: trainctl train recipe=quickstart")
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("name", "algorithm", "model", "data", "status", "steps", "metric", "duration", "started"):
        table.add_column(col, justify="right" if col in ("steps", "duration") else "left")
    for i in infos:
        table.add_row(
            i.name, i.algorithm, i.model, i.data, _status(i), _steps(i), _metric(i), fmt_seconds(i.seconds), _when(i)
        )
    stdout_console().print(table)


@app.command(
    epilog="""\
\b
Examples:
  trainctl runs show runs/quickstart            config summary, attempts, checkpoints, last metrics
  trainctl runs show quickstart --follow        the live view of a run started in another terminal
  trainctl runs show runs/grpo --all            every metric of the last step
""",
)
def show(
    run: _Run,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="attach the live view until the run stops running")
    ] = False,
    all_metrics: Annotated[bool, typer.Option("--all", "-a", help="every metric of the last step")] = False,
) -> None:
    """A run: what it trains and how, its attempts, its checkpoints and its last metrics."""
    from trainctl.runs.status import find_run, read_run

    path = find_run(run)
    if follow:
        _follow(path)
        return
    _show(read_run(path), all_metrics)


@app.command(
    epilog="""\
\b
Examples:
  trainctl runs stop quickstart                 as Ctrl-C in its terminal: the whole run stops, resumable
  trainctl runs stop runs/grpo --grace 60       wait longer before escalating to SIGTERM, then SIGKILL
""",
)
def stop(
    run: _Run,
    grace: Annotated[
        float, typer.Option("--grace", help="seconds the run gets to stop cleanly before it is made to", min=0)
    ] = 30.0,
) -> None:
    """Stop a running run, wherever it was started (here, detached, by the server, as a Ray job): its supervisor
    gets Ctrl-C, then SIGTERM and SIGKILL if it does not end in time; every process of the run stops.

    Exit codes: 0 stopped, 1 not running (or no run there)."""
    from trainctl.launch.control import stop_run
    from trainctl.runs.status import find_run

    typer.echo(stop_run(find_run(run), grace))
    typer.echo(f"Continue it: trainctl train --resume {find_run(run)}")


@app.command(
    epilog="""\
\b
Examples:
  trainctl runs logs quickstart                 the last attempt's whole output
  trainctl runs logs runs/grpo --attempt 1      an earlier attempt's
""",
)
def logs(
    run: _Run,
    attempt: Annotated[int | None, typer.Option("--attempt", help="which attempt (default: the last)")] = None,
) -> None:
    """An attempt's whole output: its log file, or a Ray job's logs from its cluster."""
    import sys

    from trainctl.launch.control import run_logs
    from trainctl.runs.status import find_run

    sys.stdout.write(run_logs(find_run(run), attempt))


@app.command(
    epilog="""\
\b
Examples:
  trainctl runs rollouts agent                  the last step's trajectories, turn by turn
  trainctl runs rollouts agent --step 2 --worst -n 3
  trainctl runs rollouts runs/agent --errors    trajectories with a tool call that failed
""",
)
def rollouts(
    run: _Run,
    step: Annotated[int | None, typer.Option("--step", help="which step (default: the last dumped)")] = None,
    best: Annotated[bool, typer.Option("--best", help="the highest rewards first")] = False,
    worst: Annotated[bool, typer.Option("--worst", help="the lowest rewards first")] = False,
    errors: Annotated[bool, typer.Option("--errors", help="only trajectories with a tool call that failed")] = False,
    limit: Annotated[int, typer.Option("--limit", "-n", help="how many to show (0: all)", min=0)] = 5,
) -> None:
    """A run's trajectories as turns: the question, each assistant turn with its tool calls and their arguments,
    each tool result, and the reward (from rollouts/N.jsonl, which runs with tools write every step).

    Exit codes: 0 shown (also when none matches), 1 no such run, step or dump."""
    from trainctl.errors import UsageError
    from trainctl.runs.rollouts import read_step, select
    from trainctl.runs.status import find_run

    if best and worst:
        raise UsageError("--best and --worst exclude each other.", hint="choose one")
    path = find_run(run)
    found = read_step(path, step)
    chosen = select(found, best, worst, errors)
    shown = chosen[:limit] if limit else chosen
    what = "with a failed tool call" if errors else "in all"
    order = ", best first" if best else ", worst first" if worst else ""
    typer.echo(
        f"step {found[0].step if found else step}: {len(chosen)} trajectories {what}{order}; showing {len(shown)}"
    )
    for t in shown:
        _trajectory(t)


def _trajectory(t) -> None:
    from trainctl.runs.rollouts import call_text

    say = typer.echo
    reward = "-" if t.score is None else f"{t.score:g}"
    calls = f" · {t.tool_calls} tool call{'s' if t.tool_calls != 1 else ''}" if t.turns else ""
    errors = f", {t.tool_errors} failed" if t.tool_errors else ""
    say("")
    say(f"#{t.index} · reward {reward}{calls}{errors}" + (f" · {t.uid}" if t.uid else ""))
    if not t.turns:
        say(f"  prompt:   {_indent(t.prompt)}")
        say(f"  response: {_indent(t.response)}")
        return
    for turn in t.turns:
        role, content = turn.get("role"), str(turn.get("content") or "")
        if role == "system":
            continue
        if role == "assistant":
            if content:
                say(f"  assistant: {_indent(content)}")
            for call in turn.get("tool_calls") or []:
                say(f"  assistant -> {call_text(call)}")
        elif role == "tool":
            say(f"  tool <- {_indent(content)}")
        else:
            say(f"  {role}: {_indent(content)}")
    if t.ground_truth is not None:
        say(f"  expected: {t.ground_truth}")


def _indent(text: str) -> str:
    return text.strip().replace("\n", "\n             ")


def _follow(path: Path) -> None:
    from trainctl.cli.live import follow
    from trainctl.errors import TrainctlError
    from trainctl.runs.progress import fmt_seconds
    from trainctl.runs.status import read_run

    info = read_run(path)
    if not info.alive:
        typer.echo(f"{info.name} is not running ({_status(info)}); its last state:", err=True)
        _show(info, False)
        return
    last = info.attempts[-1] if info.attempts else {}
    if last.get("launcher") == "ray_job" and not info.live:
        # a detached Ray job: nothing here writes its log; the cluster streams it
        raise TrainctlError(
            f"{info.name} runs as Ray job {last['job_id']}, submitted with --detach: its output is on the cluster.",
            hint=f"trainctl jobs logs {last['job_id']} --follow --address {last.get('address', 'ADDRESS')}",
        )
    typer.echo(f"Following {info.name} ({_status(info)}); Ctrl-C stops following, not the run.", err=True)
    try:
        final = follow(path)
    except KeyboardInterrupt:
        typer.echo("Stopped following; the run goes on.", err=True)
        return
    typer.echo(f"{final.name}: {_status(final)} after {fmt_seconds(final.seconds)}, step {_steps(final)}")


def _lineage(run: Path, key: str = "lineage"):
    """Where the run's model came from (model=runs/NAME), or another model it used (key reward_lineage or
    teacher_lineage: trainctl.ckpt.lineage.OTHER_MODELS), from its lock.json."""
    import json

    from trainctl.ckpt.lineage import Lineage

    try:
        found = json.loads((run / "lock.json").read_text()).get(key)
        return Lineage(**found) if found else None
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def _show(info, all_metrics: bool) -> None:
    import yaml

    from trainctl.ckpt.layout import CheckpointError, list_checkpoints
    from trainctl.launch.rundir import relative
    from trainctl.metrics import before_after, read_metrics
    from trainctl.runs.keys import key_metrics
    from trainctl.runs.progress import fmt_seconds, fmt_value

    tree = {}
    if (info.path / "trainctl.yaml").is_file():
        tree = yaml.safe_load((info.path / "trainctl.yaml").read_text()) or {}
    say = typer.echo
    say(f"{info.name}  ({relative(info.path)})")
    say(f"  status      {_status(info)}")
    hw = tree.get("hardware", {})
    say(f"  trains      {info.algorithm} on model={info.model} with data={info.data} ({info.backend})")
    lineage = _lineage(info.path)
    if lineage:
        say(f"  from        {lineage.describe()}")
    from trainctl.ckpt.lineage import OTHER_MODELS

    for other in OTHER_MODELS:  # reward by, taught by
        found = _lineage(info.path, other.lock_key)
        if found:
            say(f"  {other.shown:<11} {found.describe()}")
    if hw:
        say(
            f"  hardware    {hw.get('name')}: {hw.get('nnodes')} node(s) x {hw.get('gpus_per_node')} "
            f"{hw.get('device')}, {hw.get('launcher')}; logger={tree.get('logger', {}).get('name', '?')}"
        )
    run = tree.get("run", {})
    if run:
        keys = ("epochs", "max_steps", "seed", "save_every", "val_every")
        say("  run         " + ", ".join(f"{k}={run.get(k)}" for k in keys if k in run))
    node = tree.get("verl") or tree.get("trl") or {}
    if node:
        import textwrap

        from trainctl.backends.base import flatten, render_value

        keys = " ".join(f"{k}={render_value(v)}" for k, v in flatten(node))
        lines = textwrap.wrap(keys, 100, break_on_hyphens=False, break_long_words=False)
        say("  set         " + "\n              ".join(lines))
    args = info.raw.get("args") or []
    say(f"  command     trainctl train {' '.join(args)}")
    say(f"  steps       {_steps(info)} in {fmt_seconds(info.seconds)}")
    say("Attempts:")
    for a in info.attempts:
        state = a.get("state") or ("running" if a is info.attempts[-1] and info.alive else info.status)
        code = f", exit {a['exit_code']}" if a.get("exit_code") not in (None, 0) else ""
        kind = "Slurm" if a.get("launcher") == "slurm" else "Ray"
        job = f", {kind} job {a['job_id']}" if a.get("job_id") else ""
        seconds = f", {fmt_seconds(a['seconds'])}" if a.get("seconds") is not None else ""
        say(f"  {a['n']}  {a.get('started', '?')}  {state}{code}{seconds}{job}  log: {a.get('log')}")
        if a.get("verdict"):
            say(f"     why:  {a['verdict']}")
            if a.get("hint"):
                say(f"     next: {a['hint']}")
    say("Checkpoints:")
    try:
        listing = list_checkpoints(info.path)
        for c in listing.checkpoints:
            mark = " *" if c.latest else ""
            said = f"  incomplete: {c.incomplete}" if c.incomplete else ""
            say(f"  step {c.step}{mark}  {relative(c.path)}{said}")
    except CheckpointError as e:
        say(f"  none ({e.message})")
    changed = before_after(info.path)
    if changed:
        say("Held-out, before -> after:")
        for line in changed:
            say(f"  {line}")
    metrics = read_metrics(info.path)
    if not metrics:
        say("Metrics: none logged yet")
        return
    last = max(metrics)
    values = metrics[last]
    keyed = [n for km in key_metrics(info.family, values) if (n := km.pick(values))]
    shown = sorted(values) if all_metrics else keyed
    say(f"Last metrics (step {last}):")
    width = max((len(n) for n in shown), default=0)
    for n in shown:
        v = values[n]
        say(f"  {n:<{width}}  {fmt_value(v) if isinstance(v, int | float) or v is None else v}")
    if not all_metrics and len(values) > len(shown):
        say(f"  ({len(values) - len(shown)} more: trainctl runs show {relative(info.path)} --all)")


@app.command(
    epilog="""\
\b
Examples:
  trainctl runs compare runs/lr-1e-5 runs/lr-3e-5
  trainctl runs compare runs/grpo runs/dapo -m actor/pg_clipfrac
""",
)
def compare(
    runs: Annotated[list[Path], typer.Argument(help="two or more run folders (or names under ./runs)")],
    metric: Annotated[
        list[str] | None, typer.Option("--metric", "-m", help="a metric to add to the table (repeatable)")
    ] = None,
) -> None:
    """The config keys whose values differ between runs (trainctl's and the backend's), and their metrics side by
    side (the last value of each run's key metrics)."""
    from rich.table import Table

    from trainctl.cli.common import stdout_console
    from trainctl.errors import UsageError
    from trainctl.runs.compare import compare as run_compare
    from trainctl.runs.progress import fmt_seconds, fmt_value
    from trainctl.runs.status import find_run, read_run

    if len(runs) < 2:
        raise UsageError("compare needs two runs or more.", hint="trainctl runs compare runs/A runs/B")
    infos = [read_run(find_run(r), query_jobs=False) for r in runs]
    result = run_compare(infos, metric)
    console = stdout_console()
    names = [i.name for i in infos]

    def cell(v) -> str:
        if isinstance(v, float):
            return fmt_value(v)
        return str(v)

    table = Table(box=None, header_style="bold", pad_edge=False, title_justify="left")
    table.add_column("config key")
    for n in names:
        table.add_column(n)
    for key, values in result.differ.items():
        table.add_row(key, *(cell(v) for v in values))
    if result.differ:
        console.print(f"{len(result.differ)} config keys differ ({result.same} are the same):")
        console.print(table)
    else:
        console.print(f"The configs are the same ({result.same} keys).")
    if result.by_name:
        console.print(f"Also different, as the runs' names are: {', '.join(result.by_name)}")
    console.print("")
    metrics = Table(box=None, header_style="bold", pad_edge=False)
    metrics.add_column("metric (last value)")
    for n in names:
        metrics.add_column(n, justify="right")
    metrics.add_row("status", *(i.status for i in infos))
    metrics.add_row("steps", *(_steps(i) for i in infos))
    metrics.add_row("duration", *(fmt_seconds(i.seconds) for i in infos))
    for name, values in result.metrics.items():
        metrics.add_row(name, *(cell(v) for v in values))
    console.print(metrics)


@app.command(
    epilog="""\
\b
Examples:
  trainctl runs plot runs/a runs/b -m train/loss                 a chart in the terminal
  trainctl runs plot runs/a runs/b -m train/loss -o loss.png     a PNG, both runs on one chart
  trainctl runs plot runs/grpo -m critic/score/mean -m actor/entropy -o grpo.png   one panel per metric
""",
)
def plot(
    runs: Annotated[list[Path], typer.Argument(help="run folders (or names under ./runs)")],
    metric: Annotated[list[str], typer.Option("--metric", "-m", help="a metric to plot (repeatable)")],
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="write a PNG here (without it: a chart in the terminal)")
    ] = None,
) -> None:
    """Metrics over steps, several runs on one chart: a PNG with --out, else a chart in the terminal."""
    from trainctl.metrics import read_metrics, series, unknown_metric
    from trainctl.runs.status import find_run, read_run

    infos = [read_run(find_run(r), query_jobs=False) for r in runs]
    data = {i.name: read_metrics(i.path) for i in infos}
    logged = sorted({k for metrics in data.values() for m in metrics.values() for k in m})
    charts: dict[str, dict[str, list]] = {}
    where = " and ".join(data) if len(data) <= 3 else f"{len(data)} runs"
    for m in metric:
        error = unknown_metric(m, logged, where, _plot_fix(runs))
        if error:
            raise error
        charts[m] = {name: series(metrics, m) for name, metrics in data.items()}
        for name, points in charts[m].items():
            if not points:
                typer.echo(f"Note: {name} never logged {m}.", err=True)
    if out is not None:
        from trainctl.runs.plot import write_png

        written = write_png(charts, out)
        typer.echo(f"Wrote {written}: {', '.join(charts)} for {', '.join(data)}")
        return
    from trainctl.runs.plot import text_chart

    for m, by_run in charts.items():
        for line in text_chart(m, by_run):
            typer.echo(line)


def _plot_fix(runs: list[Path]) -> str:
    return "trainctl runs plot " + " ".join(str(r) for r in runs) + " -m {}"
