"""`trainctl model serve` on CPU hardware: an OpenAI-compatible HTTP server (Starlette on uvicorn) in front of
trainctl's batched sampler (trainctl.inference.engine).

Routes: GET /v1/models, POST /v1/chat/completions, POST /v1/completions (both streamed as server-sent events with
`stream: true`), GET /health (no auth; says only that the server is up).

Access: loopback by default. Any other --host needs a token (--token-env NAME: the token is read from that variable,
never from the command line, where `ps` would show it); with a token every /v1 request must carry
`Authorization: Bearer TOKEN` (compared in constant time) or gets a 401. On loopback the Host header must name a
loopback host (a web page cannot reach the server through DNS rebinding). No CORS headers: browsers' cross-origin
requests are refused. The token never reaches a log line or a message.

`open_server` does every check that can fail before loading the model (the port is bound first and held, so that a
port in use is said at once), then merges and loads; `Server.run` serves until Ctrl-C.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainctl.errors import TrainctlError, UsageError
from trainctl.inference.logprobs import TokenTexts, chat_logprobs, completion_logprobs, text_length
from trainctl.inference.model import Served
from trainctl.inference.openai_api import (
    Answer,
    ApiError,
    Defaults,
    Job,
    chat_job,
    chat_response,
    chunk,
    completion_job,
    completion_response,
    models_response,
    usage,
)

MAX_BODY = 16 * 1024 * 1024
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_token(host: str, token_env: str | None, environ: dict | None = None) -> str | None:
    """The bearer token to require (None: no token), or why the server must not start."""
    import os

    environ = os.environ if environ is None else environ
    if token_env is None:
        if not is_loopback(host):
            raise UsageError(
                f"--host {host} would let other machines reach the model without a token.",
                hint="export SERVE_TOKEN=$(python -c 'import secrets; print(secrets.token_urlsafe(32))') and add "
                "--token-env SERVE_TOKEN, or serve on loopback: --host 127.0.0.1",
            )
        return None
    value = environ.get(token_env, "")
    if not value.strip():
        raise UsageError(
            f"--token-env {token_env}: the variable {token_env} is {'empty' if token_env in environ else 'not set'}.",
            hint=f"export {token_env}=$(python -c 'import secrets; print(secrets.token_urlsafe(32))')",
        )
    return value.strip()


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (held until the server runs on it); a port in use is a TrainctlError."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
        sock.listen(2048)
    except OSError as e:
        sock.close()
        if e.errno == 98 or "in use" in str(e).lower():  # EADDRINUSE
            raise TrainctlError(
                f"port {port} on {host} is in use: another server (or another `trainctl model serve`) holds it.",
                hint=f"choose another port: --port {free_port(host)}   (who holds it: ss -ltnp 'sport = :{port}')",
            ) from None
        raise TrainctlError(f"cannot listen on {host}:{port}: {e.strerror or e}", hint="--host 127.0.0.1") from None
    sock.set_inheritable(True)
    return sock


def free_port(host: str = "127.0.0.1") -> int:
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host.strip("[]"), 0))
        return s.getsockname()[1]


# -- the app ----------------------------------------------------------------------------------------------------------


class Service:
    """What the routes use: the engine, the prompt builder, the defaults, the access rules."""

    def __init__(self, engine, prompter, tokenizer, defaults: Defaults, token: str | None, loopback_only: bool):
        self.engine = engine
        self.prompter = prompter
        self.tokenizer = tokenizer
        self.defaults = defaults
        self._token = token.encode() if token else None
        self.loopback_only = loopback_only
        self.created = int(time.time())
        self.token_texts = TokenTexts(tokenizer)

    def authorized(self, header: str | None) -> bool:
        if self._token is None:
            return True
        scheme, _, value = (header or "").partition(" ")
        # constant time: the comparison takes as long whatever prefix of the token a caller guessed
        return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), self._token)

    # --- answers ---

    async def answer(self, job: Job, prompt: list[int], index: int, stream_to: asyncio.Queue | None) -> Answer:
        """Generate one choice; with `stream_to`, put its chunks there as they come."""
        from trainctl.inference.text import TextStream, cut_at_stop

        marker = getattr(self.prompter.parser, "tool_call_start_token", None) if job.tools else None
        text_stream = TextStream(self.tokenizer, stops=job.stops, markers=[marker] if marker else [])
        echo = job.echo_text[index // job.n] if job.echo_text else None
        scored = job.logprobs is not None
        if stream_to is not None and job.kind == "chat":
            stream_to.put_nowait(chunk(job, self.defaults, index, {"role": "assistant", "content": ""}))
        if stream_to is not None and echo is not None and not scored:
            stream_to.put_nowait(chunk(job, self.defaults, index, {"content": echo}))
        completion, prompt_logprobs, offset = None, None, 0
        async for update in self.engine.stream(prompt, job.params):
            completion = update.done
            if update.prompt is not None:
                prompt_logprobs = update.prompt
                if stream_to is not None and echo is not None:  # the prompt, with its log-probs, once they exist
                    logprobs = self._logprobs(job, prompt, update.prompt.token_logprobs, update.prompt.top)
                    stream_to.put_nowait(chunk(job, self.defaults, index, {"content": echo}, logprobs=logprobs))
                    offset = text_length(self.token_texts, prompt)
            if job.echo_only:
                continue  # the one token sampled is no part of the answer
            piece = text_stream.push(update.tokens)
            logprobs = None
            if scored and update.tokens:
                logprobs = self._logprobs(job, update.tokens, update.logprobs, update.top, offset)
            if (piece or logprobs) and stream_to is not None:
                stream_to.put_nowait(chunk(job, self.defaults, index, {"content": piece}, logprobs=logprobs))
                offset += text_length(self.token_texts, update.tokens) if scored else 0
        if job.echo_only:
            if stream_to is not None:
                stream_to.put_nowait(chunk(job, self.defaults, index, {}, "length"))
            answer = Answer(index, echo, "length", 0)
            answer.logprobs = self._logprobs(job, prompt, prompt_logprobs.token_logprobs, prompt_logprobs.top)
            return answer
        ids = completion.token_ids
        stopped_by_token = completion.finish_reason == "stop" and isinstance(completion.stop_reason, int)
        body = ids[:-1] if stopped_by_token else ids
        text = cut_at_stop(self.tokenizer.decode(ids, skip_special_tokens=True), job.stops)
        answer = Answer(index, text, completion.finish_reason, len(ids))
        if scored:
            tops = completion.top_logprobs
            if echo is None:
                answer.logprobs = self._logprobs(job, ids, completion.log_probs, tops)
            else:  # the prompt's tokens, then the answer's
                p = prompt_logprobs
                tops = [*p.top, *(tops or [None] * len(ids))]
                answer.logprobs = self._logprobs(job, [*prompt, *ids], [*p.token_logprobs, *completion.log_probs], tops)
        if job.tools:
            content, calls = await self.prompter.tool_calls(body)
            if calls:
                answer.text, answer.tool_calls, answer.finish_reason = content, calls, "tool_calls"
        if stream_to is not None:
            rest = text_stream.finish(answer.text or "")
            if rest:
                stream_to.put_nowait(chunk(job, self.defaults, index, {"content": rest}))
            if answer.tool_calls:
                calls = [{"index": i, **c.to_openai()} for i, c in enumerate(answer.tool_calls)]
                stream_to.put_nowait(chunk(job, self.defaults, index, {"tool_calls": calls}))
            stream_to.put_nowait(chunk(job, self.defaults, index, {}, answer.finish_reason))
        if job.echo_text and answer.text is not None:
            answer.text = job.echo_text[index // job.n] + answer.text
        return answer

    def _logprobs(self, job: Job, token_ids, logprobs, tops, offset: int = 0) -> dict:
        if job.kind == "chat":
            return chat_logprobs(self.token_texts, token_ids, logprobs, tops)
        return completion_logprobs(self.token_texts, token_ids, logprobs, tops, offset)

    def choices(self, job: Job) -> list[tuple[int, list[int]]]:
        return [(i * job.n + j, prompt) for i, prompt in enumerate(job.prompts) for j in range(job.n)]

    async def respond(self, job: Job) -> dict:
        tasks = [asyncio.ensure_future(self.answer(job, p, i, None)) for i, p in self.choices(job)]
        try:
            answers = await asyncio.gather(*tasks)
        except BaseException:  # one choice failed: the others leave the batch too
            for task in tasks:
                task.cancel()
            raise
        build = chat_response if job.kind == "chat" else completion_response
        return build(job, self.defaults, list(answers))

    async def events(self, job: Job):
        """The streamed answer: server-sent events, `data: [DONE]` last."""
        queue: asyncio.Queue = asyncio.Queue()
        tasks = [asyncio.ensure_future(self.answer(job, p, i, queue)) for i, p in self.choices(job)]
        waiter = asyncio.ensure_future(asyncio.gather(*tasks))
        try:
            while True:
                getter = asyncio.ensure_future(queue.get())
                await asyncio.wait([getter, waiter], return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    yield f"data: {json.dumps(getter.result())}\n\n"
                    continue
                getter.cancel()
                while not queue.empty():
                    yield f"data: {json.dumps(queue.get_nowait())}\n\n"
                break
            error = waiter.exception()
            if error is not None:
                yield f"data: {json.dumps(_error_body(error))}\n\n"
            elif job.include_usage:
                answers = waiter.result()
                prompt_tokens = sum(len(p) for p in job.prompts) * (job.n if job.kind == "completion" else 1)
                last = chunk(job, self.defaults, None)
                last["usage"] = usage(prompt_tokens, sum(a.tokens for a in answers))
                yield f"data: {json.dumps(last)}\n\n"
            yield "data: [DONE]\n\n"
        finally:  # a client that hung up: its requests leave the batch
            for task in tasks:
                task.cancel()
            waiter.cancel()


class _ClientGone(Exception):
    """The client hung up before its answer was ready."""


async def _unless_gone(request, work):
    """The answer, unless the client hangs up first: then its requests leave the batch (a stream's do as soon as a
    chunk cannot be sent; a whole answer sends nothing until it is done, so the connection is watched)."""
    answer = asyncio.ensure_future(work)

    async def gone() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(gone())
    try:
        await asyncio.wait([answer, watcher], return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not answer.done():
            answer.cancel()
    if not answer.done() or answer.cancelled():
        raise _ClientGone()
    return answer.result()


def _error_body(error: BaseException) -> dict:
    if isinstance(error, ApiError):
        return error.body()
    return ApiError(500, f"generation failed: {type(error).__name__}: {error}").body()


def build_app(service: Service):
    """The Starlette app: the routes, the host check and the token check (as ASGI middleware)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    def error(e: ApiError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if e.status == 401 else None
        return JSONResponse(e.body(), status_code=e.status, headers=headers)

    async def body_of(request: Request) -> dict:
        size = int(request.headers.get("content-length") or 0)
        if size > MAX_BODY:
            raise ApiError(413, f"the request body is {size} bytes; at most {MAX_BODY}")
        raw = await request.body()
        if len(raw) > MAX_BODY:
            raise ApiError(413, f"the request body is over {MAX_BODY} bytes")
        try:
            body = json.loads(raw or b"{}")
        except ValueError as e:
            raise ApiError(400, f"the request body is not JSON: {e}") from None
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object")
        model = body.get("model")
        if model not in (None, service.defaults.name):
            raise ApiError(404, f"The model `{model}` does not exist (this server has {service.defaults.name!r}).",
                           "model", "model_not_found")  # fmt: skip
        return body

    async def generate(request: Request, make_job: Callable[[dict], Job]):
        try:
            job = make_job(await body_of(request))
            if job.stream:
                headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
                return StreamingResponse(service.events(job), media_type="text/event-stream", headers=headers)
            return JSONResponse(await _unless_gone(request, service.respond(job)))
        except ApiError as e:
            return error(e)
        except _ClientGone:  # nobody reads it: nginx's "client closed request"
            return Response(status_code=499)
        except Exception as e:  # a failure of generation: an OpenAI-shaped 500, the server goes on
            return error(ApiError(500, f"generation failed: {type(e).__name__}: {e}"))

    async def chat(request: Request):
        return await generate(request, lambda body: chat_job(body, service.defaults, service.prompter))

    async def completions(request: Request):
        return await generate(request, lambda body: completion_job(body, service.defaults, service.tokenizer))

    async def models(request: Request):
        return JSONResponse(models_response(service.defaults, service.created))

    async def health(request: Request):
        return JSONResponse({"status": "ok"})

    routes = [
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
    ]
    app = Starlette(routes=routes)
    return _guard(app, service, error)


def _guard(app, service: Service, error):
    """Host check (loopback servers) and token check, before any route runs."""

    def header(scope, name: bytes) -> str | None:
        for key, value in scope.get("headers") or []:
            if key == name:
                return value.decode("latin-1")
        return None

    async def guarded(scope, receive, send):
        if scope["type"] == "http":
            if service.loopback_only and not _loopback_host(header(scope, b"host")):
                await error(ApiError(400, "Invalid host header: this server answers loopback names only"))(
                    scope, receive, send
                )
                return
            if scope["path"].startswith("/v1") and not service.authorized(header(scope, b"authorization")):
                message = "a bearer token is required (Authorization: Bearer TOKEN)"
                await error(ApiError(401, message, code="invalid_api_key"))(scope, receive, send)
                return
        await app(scope, receive, send)

    return guarded


def _loopback_host(host: str | None) -> bool:
    if not host:
        return False
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 or host.startswith("[") else host
    return name.strip("[]") in LOOPBACK_NAMES or is_loopback(name)


# -- running it -----------------------------------------------------------------------------------------------


@dataclass
class Server:
    """A loaded model on a bound socket, ready to `run` (blocks) or to `start` in a thread (tests, benchmarks)."""

    served: Served
    host: str
    port: int
    sock: socket.socket
    app: Any
    service: Service
    folder: Any
    _uvicorn: Any = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    def _server(self, log_level: str, access_log: bool):
        import uvicorn

        config = uvicorn.Config(
            self.app,
            log_level=log_level,
            access_log=access_log,
            timeout_graceful_shutdown=3,  # open streams would otherwise hold Ctrl-C
            lifespan="off",
        )
        self._uvicorn = uvicorn.Server(config)
        return self._uvicorn

    def run(self, log_level: str = "info", access_log: bool = True) -> None:
        """Serve until Ctrl-C or SIGTERM."""
        try:
            self._server(log_level, access_log).run(sockets=[self.sock])
        finally:
            self.sock.close()

    def start(self, log_level: str = "warning") -> None:
        """Serve from a thread of this process; `stop()` ends it."""
        import threading

        server = self._server(log_level, False)
        self._thread = threading.Thread(target=server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self._thread.start()
        while not server.started and self._thread.is_alive():
            time.sleep(0.01)

    def stop(self) -> None:
        if self._uvicorn is not None:
            self._uvicorn.should_exit = True
        thread = getattr(self, "_thread", None)
        if thread is not None:
            thread.join(10)
        self.sock.close()


def open_server(
    served: Served,
    host: str = "127.0.0.1",
    port: int = 8000,
    token: str | None = None,
    status: Callable[[str], None] | None = None,
) -> Server:
    """Bind, merge (when MODEL is shards or an adapter) and load; every failure before loading is a TrainctlError.
    The socket is bound first, so that a port in use is said before seconds of loading."""
    from trainctl.inference.engine import Batch, Engine, load
    from trainctl.inference.model import context_length
    from trainctl.inference.prompts import Prompter

    say = status or (lambda _: None)
    sock = bind(host, port)
    try:
        if served.resolved.kind in ("run", "checkpoint") and served.target.folder is None:
            say(f"Merging {served.target.source} into the cache (once; verified, as `trainctl ckpt merge` does)")
        folder = served.folder()
        say(f"Loading {folder}")
        loaded = load(folder, served.cfg.hardware.attn_implementation or "sdpa")
        batch = Batch(
            loaded,
            seed=served.sampling.seed,
            max_batch_size=int(served.value("actor_rollout_ref.rollout.max_num_seqs") or 256),
            max_prefill_tokens=int(served.value("actor_rollout_ref.rollout.max_num_batched_tokens") or 8192),
        )
        prompter = Prompter(loaded.tokenizer, folder, served.chat_template_kwargs, served.tool_format)
        prompter.builder()  # imports verl's prompt builder now, not in the first request
        d = served.sampling_defaults()
        defaults = Defaults(
            served.name, d["temperature"], d["top_p"], d["top_k"], d["max_tokens"], context_length(folder)
        )
        service = Service(Engine(batch), prompter, loaded.tokenizer, defaults, token, loopback_only=is_loopback(host))
        return Server(served, host, sock.getsockname()[1], sock, build_app(service), service, folder)
    except BaseException:
        sock.close()
        raise
