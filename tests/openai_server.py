"""An OpenAI-compatible `POST /v1/chat/completions` on 127.0.0.1, in a background thread, for the endpoints the tests
stand up (the judge, the task generator): a subclass answers `reply(body, headers) -> (status, text)` and is used
as a context manager; `url` is the base URL a client is given (.../v1)."""

from __future__ import annotations

import json
import time

from tests.models.local_server import LocalServer


class ChatCompletionsServer(LocalServer):
    def __init__(self) -> None:
        super().__init__()
        self.url = f"{self.url}/v1"

    def reply(self, body: dict, headers) -> tuple[int, str]:
        raise NotImplementedError

    def _post(self, h) -> None:
        body = json.loads(h.rfile.read(int(h.headers["Content-Length"])))
        status, text = self.reply(body, h.headers)
        message = {"role": "assistant", "content": text}
        payload = json.dumps(
            {
                "id": "chatcmpl-test",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", ""),
                "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
            }
            if status == 200
            else {"error": {"message": text}}
        ).encode()
        try:
            h.send_response(status)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(payload)))
            h.end_headers()
            h.wfile.write(payload)
        except OSError:  # the client gave up (a slow answer): nothing to do
            pass
