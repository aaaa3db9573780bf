"""Running the server: uvicorn on one address, log lines through the Redactor, Ctrl-C that does not wait on open
streams (uvicorn's graceful shutdown is bounded), and the server's own children (merges, evals) stopped with it.
Runs it started are not its children: they go on."""

from __future__ import annotations

import errno
import logging
import socket
import sys
from pathlib import Path

from trainctl.errors import TrainctlError

# open SSE tabs would otherwise hold Ctrl-C until they close
GRACEFUL_SHUTDOWN_S = 2


class RedactLogs(logging.Filter):
    def __init__(self, secrets):
        super().__init__()
        self.secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = self.secrets.text(record.getMessage())
        record.args = ()
        return True


def run_server(
    roots: list[Path],
    host: str,
    port: int,
    token: str | None,
    allow_actions: bool,
    allow_hosts: list[str],
    log_level: str = "warning",
) -> None:
    import uvicorn

    from trainctl.serve.app import ServeConfig, build

    config = ServeConfig([Path(r) for r in roots], host, port, token, allow_actions, allow_hosts)
    app = build(config)
    secrets = app.secrets
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).addFilter(RedactLogs(secrets))
    sock = _bind(host, port)
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    where = ", ".join(str(r) for r in config.roots)
    print(
        f"trainctl serve: http://{'[' + shown + ']' if ':' in shown else shown}:{port}/  (runs: {where}; actions "
        f"{'on' if allow_actions else 'off'}; {'token required' if token else 'no token: loopback only'})",
        file=sys.stderr,
        flush=True,
    )
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            log_level=log_level,
            access_log=log_level in ("info", "debug"),
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
            lifespan="off",
            server_header=False,
        )
    )
    try:
        server.run(sockets=[sock])
    finally:
        app.inner.state.actions.stop_all()
        sock.close()


def _bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so that a taken port is one clear error before anything else starts."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise TrainctlError(f"port {port} on {host} is in use.", hint=f"trainctl serve --port {port + 1}") from None
        raise TrainctlError(
            f"cannot listen on {host}:{port}: {e.strerror}.", hint="trainctl serve --host 127.0.0.1"
        ) from None
    sock.listen(128)
    sock.set_inheritable(False)
    return sock
