"""verl's rollout Prometheus switch: the settings it needs are checked before anything starts, and before a launch
the Prometheus verl would reload is probed (a real HTTP server standing in for it)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from trainctl.checks.prometheus import probe

ON = "actor_rollout_ref.rollout.prometheus.enable=true"
GPU = ["algorithm=grpo", "model=qwen2.5-7b", "data=gsm8k", "hardware=8gpu"]


def test_the_switch_needs_log_stats_and_a_server_rollout(cli):
    r = cli("config", "validate", *GPU, ON)
    assert r.exit_code == 1
    assert "disable_log_stats is true" in r.stderr and "disable_log_stats=false" in r.stderr
    r = cli("config", "validate", "recipe=grpo-arith-tiny-cpu", ON, "actor_rollout_ref.rollout.disable_log_stats=false")
    assert r.exit_code == 1 and "the rollout here is 'hf', which serves none" in r.stderr


class Prometheus(BaseHTTPRequestHandler):
    lifecycle = "true"

    def do_GET(self):
        body = b"Prometheus Server is Ready.\n"
        if self.path == "/api/v1/status/flags":
            body = json.dumps({"status": "success", "data": {"web.enable-lifecycle": self.lifecycle}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("lifecycle", ["true", "false"])
def test_before_a_launch_the_prometheus_verl_reloads_is_probed(lifecycle):
    handler = type("P", (Prometheus,), {"lifecycle": lifecycle})
    server = ThreadingHTTPServer(("0.0.0.0", 0), handler)  # where verl reloads it: this node's address
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        found = [p.message for p in probe(port, "/tmp/ray/prometheus.yml") if "curl" not in p.message]
    finally:
        server.shutdown()
        server.server_close()
    if lifecycle == "true":
        assert found == []
    else:
        assert len(found) == 1 and "without --web.enable-lifecycle" in found[0]
    gone = probe(port, "/tmp/ray/prometheus.yml")
    assert any("no Prometheus answers" in p.message and p.severity == "warning" for p in gone)
