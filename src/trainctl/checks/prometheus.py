"""verl's own Prometheus switch for the rollout servers (`actor_rollout_ref.rollout.prometheus.*`, verl 0.9.1).

With `enable`, verl writes a Prometheus config listing the vLLM/SGLang servers to `file` on every node and asks the
Prometheus at `port` to reload it (`curl -X POST http://NODE_IP:PORT/-/reload`). It needs the async (server) rollout
and `disable_log_stats=False` (verl raises otherwise, once the cluster is up), and swallows every failure of the
reload: a Prometheus that is not there, or was started without `--web.enable-lifecycle`, means no rollout metrics
and no error. So the switch is checked here, and the Prometheus probed before a launch.
"""

from __future__ import annotations

import shutil
import socket

from trainctl.checks.base import Subject
from trainctl.errors import Problem

KEY = "actor_rollout_ref.rollout"
SERVER_ENGINES = ("vllm", "sglang")
PROBE_TIMEOUT_S = 2.0


def checks(s: Subject) -> list[Problem]:
    if not s.value(f"{KEY}.prometheus.enable"):
        return []
    out = []
    if s.value(f"{KEY}.disable_log_stats", True):
        out.append(
            Problem(
                f"{KEY}.prometheus.enable needs the rollout servers' statistics, but {KEY}.disable_log_stats is "
                "true (verl would stop with a ValueError once the cluster is up).",
                key=f"{KEY}.disable_log_stats",
                hint=f"{KEY}.disable_log_stats=false",
            )
        )
    mode = s.value(f"{KEY}.mode")
    if mode != "async":
        out.append(
            Problem(
                f"{KEY}.prometheus.enable reads the async rollout's servers; {KEY}.mode is {mode!r}.",
                key=f"{KEY}.mode",
                hint=f"{KEY}.mode=async",
            )
        )
    engine = s.value(f"{KEY}.name")
    if engine not in SERVER_ENGINES:
        out.append(
            Problem(
                f"{KEY}.prometheus.enable exports the metrics of vLLM or SGLang servers; the rollout here is "
                f"{engine!r}, which serves none.",
                key=f"{KEY}.name",
                hint="a GPU hardware option (hardware=8gpu: vLLM), or leave the switch off",
            )
        )
    if s.launching and not out:
        out += probe(int(s.value(f"{KEY}.prometheus.port") or 9090), str(s.value(f"{KEY}.prometheus.file") or ""))
    return out


def probe(port: int, file: str) -> list[Problem]:
    """Whether a Prometheus that verl can reload answers on this node (warnings: training runs without it)."""
    import urllib.error
    import urllib.request

    out = []
    if shutil.which("curl") is None:
        out.append(
            Problem(
                "verl reloads Prometheus with `curl`, which is not installed here: the rollout servers would never "
                "be scraped.",
                key=f"{KEY}.prometheus.enable",
                hint="apt-get install -y curl",
                severity="warning",
            )
        )
    try:
        host = socket.gethostbyname(socket.gethostname())  # where verl sends the reload
    except OSError:
        host = "127.0.0.1"
    url = f"http://{host}:{port}"
    start = f"prometheus --config.file={file} --web.enable-lifecycle --web.listen-address=:{port}"
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=PROBE_TIMEOUT_S) as r:
            ready = r.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        ready = False
    if not ready:
        out.append(
            Problem(
                f"no Prometheus answers at {url} ({KEY}.prometheus.port={port}): verl would write {file} and ask "
                "nothing to reload it, and say nothing of it.",
                key=f"{KEY}.prometheus.port",
                hint=f"start it first: {start}",
                severity="warning",
            )
        )
        return out
    try:  # its flags say whether it takes reloads over HTTP (asked, not tried: a reload is not ours to do)
        import json

        with urllib.request.urlopen(f"{url}/api/v1/status/flags", timeout=PROBE_TIMEOUT_S) as r:
            flags = json.loads(r.read()).get("data") or {}
    except (urllib.error.URLError, OSError, ValueError):
        flags = {}
    if str(flags.get("web.enable-lifecycle", "true")).lower() != "true":
        out.append(
            Problem(
                f"the Prometheus at {url} was started without --web.enable-lifecycle: it refuses verl's reload, so "
                "it would never scrape the rollout servers.",
                key=f"{KEY}.prometheus.port",
                hint=f"restart it: {start}",
                severity="warning",
            )
        )
    return out
