"""`trainctl serve`: the local training platform over the run folders (trainctl.serve)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trainctl.cli.common import tethered

EPILOG = """\
\b
Examples:
  trainctl serve                                  http://127.0.0.1:8765/ over ./runs, read-only
  trainctl serve --runs runs --runs /data/runs    several folders of runs
  trainctl serve --allow-actions                  launch, stop, resume; merge, evaluate, prune checkpoints
  export TRAINCTL_SERVE_TOKEN="$(python -c 'import secrets; print(secrets.token_urlsafe(32))')"
  trainctl serve --host 0.0.0.0 --token-env TRAINCTL_SERVE_TOKEN   reachable from other machines, with a token
\b
API: /api/jobs (GET, POST), /api/jobs/UUID (/start /stop /resume /metrics /checkpoints /events), /api/gpus;
/openapi.json describes it; /metrics is for Prometheus.
"""


@tethered
def serve(
    runs: Annotated[
        list[Path] | None,
        typer.Option("--runs", help="a folder of run folders (repeatable; default ./runs)", show_default=False),
    ] = None,
    host: Annotated[str, typer.Option("--host", help="the address to bind; not loopback needs --token-env")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option("--port", help="the port", min=1, max=65535)] = 8765,
    token_env: Annotated[
        str | None,
        typer.Option(
            "--token-env",
            help="the environment variable holding the token every request must carry",
            show_default=False,
        ),
    ] = None,
    allow_actions: Annotated[
        bool,
        typer.Option(
            "--allow-actions",
            help="allow launch, start, stop, resume, merge, eval and prune (they run "
            "code: reward functions, MCP servers)",
        ),
    ] = False,
    allow_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-host",
            help="another name the Host header may carry (a reverse proxy's; repeatable)",
            show_default=False,
        ),
    ] = None,
    log_level: Annotated[str, typer.Option("--log-level", help="uvicorn's: warning, info, debug")] = "warning",
) -> None:
    """Serve the run folders: the runs table, live charts, GPUs, checkpoints, trajectories and a launch form in a
    browser, a REST API for jobs, and /metrics for Prometheus. One process; runs it starts outlive it.

    Exit codes: 0 stopped (Ctrl-C), 1 a problem (a runs folder missing, a host without a token, the port taken).
    """
    from trainctl.errors import TrainctlError
    from trainctl.serve.security import read_token

    roots = [r.expanduser() for r in runs or [Path("runs")]]
    for r in roots:
        if not r.is_dir():
            if r == Path("runs") and not runs:
                r.mkdir(parents=True, exist_ok=True)  # a fresh project: runs land here
                continue
            raise TrainctlError(f"--runs {r}: no such folder.", hint="trainctl serve --runs FOLDER_OF_RUNS")
    token = read_token(host, token_env)
    if token_env:
        import os

        # the jobs, merges and evals it starts inherit its environment: the token stays with the server
        os.environ.pop(token_env, None)
    from trainctl.serve.server import run_server

    run_server(roots, host, port, token, allow_actions, allow_host or [], log_level)
