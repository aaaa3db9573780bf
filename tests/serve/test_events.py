"""The live stream under load, on loopback: 300 clients on one run while it writes metrics, a third of them dropping
their connection midway and coming back with Last-Event-ID; every client sees every step once. The figures (first
event, step latency, RSS, events per client) are printed; benchmarks/bench_serve.py measures more clients and steps."""

from __future__ import annotations

import os

from tests.serve.conftest import end, start_server
from tests.serve.sse_load import live_run, load
from trainctl.serve.store import run_uuid

CLIENTS = 300
STEPS = 30
# the server's memory with every stream open (85 MB measured with 300 clients, 77 MB here)
MAX_RSS_MB = 200


def test_300_clients_see_every_step_once_reconnects_included(tmp_path):
    root = tmp_path / "runs"
    root.mkdir()
    sleeper = live_run(root / "live")
    env = {**os.environ, "TRAINCTL_HOME": str(tmp_path / "home")}
    server = start_server([root], env, tmp_path, log=tmp_path / "server.log")
    try:
        result = load(server.url, run_uuid(root / "live"), root / "live", server.proc.pid, CLIENTS, STEPS)
    finally:
        server.stop()
        end(sleeper)
    print(result.figures())
    assert not result.problems(STEPS), result.problems(STEPS)[:10]
    assert sum(c.connections > 1 for c in result.clients) == CLIENTS // 3
    assert result.rss_mb < MAX_RSS_MB, result.figures()
