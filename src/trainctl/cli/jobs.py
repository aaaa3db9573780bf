"""`trainctl jobs ...`: Ray jobs on the cluster a hardware option (or --address) names."""

from __future__ import annotations

import os
import time
from typing import Annotated

import typer

from trainctl.errors import RunFailed, RunInterrupted, TrainctlError

app = typer.Typer(
    help="Ray jobs: list, inspect, follow and stop runs submitted to a cluster.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

Address = Annotated[
    str | None,
    typer.Option(
        "--address", help="the cluster's Jobs API, http://HEAD:8265 (default: $RAY_ADDRESS)", show_default=False
    ),
]
Hardware = Annotated[
    str | None,
    typer.Option("--hardware", help="take the address from this hardware option (e.g. 4x8gpu)", show_default=False),
]
JobId = Annotated[str, typer.Argument(help="the job id")]


def _address(address: str | None, hardware: str | None) -> str:
    if address:
        return address
    if hardware:
        from trainctl.config.load import load

        found = load([f"hardware={hardware}"]).cfg.hardware.ray_address
        if found:
            return str(found)
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"]
    raise TrainctlError(
        "which cluster? No --address, RAY_ADDRESS or hardware option with a ray_address.",
        hint="trainctl jobs ls --address http://HEAD_IP:8265",
    )


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"


@app.command(
    "ls",
    epilog="""\
\b
Examples:
  trainctl jobs ls --address http://10.0.0.1:8265
  trainctl jobs ls --hardware 4x8gpu             the cluster that hardware option submits to
""",
)
def ls(address: Address = None, hardware: Hardware = None) -> None:
    """List the cluster's jobs, newest first."""
    from rich.table import Table

    from trainctl.cli.common import stdout_console
    from trainctl.launchers.ray_jobs import list_jobs

    jobs = list_jobs(_address(address, hardware))
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("job", "status", "run", "started", "ended", "entrypoint"):
        table.add_column(col)
    for j in jobs:
        table.add_row(j.job_id, j.status, j.run or "-", _when(j.start), _when(j.end), j.entrypoint[:80])
    stdout_console().print(table)


@app.command(
    epilog="""\
\b
Example:
  trainctl jobs status raysubmit_XyZ12 --hardware 4x8gpu
"""
)
def status(job_id: JobId, address: Address = None, hardware: Hardware = None) -> None:
    """A job's status and message."""
    from trainctl.launchers.ray_jobs import job_status

    info = job_status(_address(address, hardware), job_id)
    typer.echo(f"{info.job_id}: {info.status}" + (f" ({info.message})" if info.message else ""))


@app.command(
    epilog="""\
\b
Example:
  trainctl jobs logs raysubmit_XyZ12 --follow
"""
)
def logs(
    job_id: JobId,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="stream until the job ends; exit with its outcome")
    ] = False,
    address: Address = None,
    hardware: Hardware = None,
) -> None:
    """A job's logs (with --follow: streamed until it ends; Ctrl-C stops the job)."""
    import sys

    from trainctl.launchers.ray_jobs import follow as follow_job
    from trainctl.launchers.ray_jobs import job_logs

    where = _address(address, hardware)
    if not follow:
        typer.echo(job_logs(where, job_id), nl=False)
        return
    info = follow_job(where, job_id, sys.stdout, None, dict(os.environ))
    if info.status == "FAILED":
        raise RunFailed(f"job {job_id} FAILED: {info.message}")
    if info.status == "STOPPED":
        raise RunInterrupted(f"job {job_id} was stopped.")


@app.command(
    epilog="""\
\b
Example:
  trainctl jobs stop raysubmit_XyZ12 --address http://10.0.0.1:8265
"""
)
def stop(job_id: JobId, address: Address = None, hardware: Hardware = None) -> None:
    """Stop a running job (its processes on the cluster end)."""
    from trainctl.launchers.ray_jobs import stop_job

    info = stop_job(_address(address, hardware), job_id)
    typer.echo(f"{info.job_id}: {info.status}")
