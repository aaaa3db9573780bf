"""An HTTP server on 127.0.0.1 in a background thread, for the fake hubs and the OpenAI-compatible endpoints the tests
stand up: a subclass implements `_handle(handler, head)` (HEAD and GET) and, to take POST, `_post(handler)`; it is
used as a context manager."""

from __future__ import annotations

import http.server
import threading


class LocalServer:
    def __init__(self) -> None:
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                server._handle(self, head=True)

            def do_GET(self):
                server._handle(self, head=False)

            def do_POST(self):
                server._post(self)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _handle(self, h: http.server.BaseHTTPRequestHandler, head: bool) -> None:
        raise NotImplementedError

    def _post(self, h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_error(501, "POST is not served here")

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
