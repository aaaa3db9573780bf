"""The OpenAI API's shapes: requests to chat/completions and completions read into generation jobs, and answers
(whole, or streamed as chunks) written back.

A request's missing sampling settings take the served model's defaults: the run's validation settings (greedy unless
val_kwargs say otherwise) and data.max_response_length tokens, so that a plain request gets the answer `trainctl eval`
scored. Settings the CPU sampler does not implement are refused with a 400 rather than ignored: presence and frequency
penalties, a forced tool choice, a JSON response format. vLLM's extensions `top_k`, `repetition_penalty`,
`ignore_eos` and `chat_template_kwargs` are taken. `seed` is accepted and not per request: sampled requests share the
server's generator (seeded once, with run.seed), as they share a batch.

Log-probs (trainctl.inference.logprobs has their shapes): `logprobs` (0 to MAX_LOGPROBS likeliest tokens) on
completions, with `echo` the prompt's too (and `max_tokens` 0 with `echo` scores the prompt alone, as vLLM does);
`logprobs: true` with `top_logprobs` on chat completions.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from trainctl.inference.prompts import Prompter, ToolCall, normalize_messages
from trainctl.runtime.sampler import SamplingParams

MAX_N = 16
MAX_LOGPROBS = 20  # vLLM's default max_logprobs


class ApiError(Exception):
    """A request the server refuses: the status and OpenAI's error body."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def body(self) -> dict:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        if self.status == 401:
            kind = "authentication_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}


@dataclass
class Defaults:
    """What a request that says nothing gets, and what bounds it."""

    name: str
    temperature: float
    top_p: float
    top_k: int
    max_tokens: int
    context_length: int | None


@dataclass
class Job:
    """One request, read: the prompts (several for a completions request with a list), n answers each, how."""

    kind: str  # chat | completion
    prompts: list[list[int]]
    params: SamplingParams
    n: int
    stream: bool
    include_usage: bool
    stops: list[str]
    tools: list[dict] | None = None  # parse tool calls from the answers
    echo_text: list[str] = field(default_factory=list)  # completions: the prompts' text when echo is set
    # log-probs of the answer's tokens, with this many likeliest at each (None: none); with echo_text, the prompt's too
    logprobs: int | None = None
    echo_only: bool = False  # completions' echo with max_tokens 0: the prompt scored, nothing generated
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:24])
    created: int = field(default_factory=lambda: int(time.time()))


def _number(body: dict, key: str, kind, default, low=None, high=None):
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ApiError(400, f"'{key}' must be a number, got {value!r}", key)
    if kind is int and int(value) != value:
        raise ApiError(400, f"'{key}' must be an integer, got {value!r}", key)
    value = kind(value)
    if (low is not None and value < low) or (high is not None and value > high):
        raise ApiError(400, f"'{key}' = {value} is out of range [{low}, {high}]", key)
    return value


def _refuse_unsupported(body: dict) -> None:
    for key in ("presence_penalty", "frequency_penalty"):
        if body.get(key) not in (None, 0, 0.0):
            raise ApiError(400, f"'{key}' is not supported by trainctl's CPU sampler (only 0)", key)
    if body.get("best_of") not in (None, 1) or body.get("suffix") not in (None, ""):
        key = "best_of" if body.get("best_of") not in (None, 1) else "suffix"
        raise ApiError(400, f"'{key}' is not supported by this server", key)
    fmt = body.get("response_format")
    if fmt not in (None, {"type": "text"}) and (fmt or {}).get("type") != "text":
        raise ApiError(
            400, "'response_format' other than text is not supported (no guided decoding)", "response_format"
        )
    choice = body.get("tool_choice")
    if choice not in (None, "auto", "none"):
        raise ApiError(
            400, "'tool_choice' may be 'auto' or 'none' here (a forced call needs guided decoding)", "tool_choice"
        )


def _stops(body: dict) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise ApiError(400, "'stop' must be a string or a list of strings", "stop")
    return [s for s in stops if s]


def _params(
    body: dict, d: Defaults, prompt_len: int, stop_ids: list[int], logprobs: int | None = None, echo: bool = False
) -> SamplingParams:
    """The sampling settings; with echo and logprobs, the prompt's log-probs too; max_tokens 0 (echo only) samples
    one token, which the answer leaves out."""
    asked = body.get("max_completion_tokens", body.get("max_tokens"))
    max_tokens = _number({"max_tokens": asked}, "max_tokens", int, d.max_tokens, low=0 if echo else 1)
    max_tokens = max_tokens or 1
    if d.context_length:
        room = d.context_length - prompt_len
        if room < 1 or (asked is not None and max_tokens > room):
            raise ApiError(
                400,
                f"This model's maximum context length is {d.context_length} tokens. However, you requested "
                f"{prompt_len + max_tokens} tokens ({prompt_len} in the prompt, {max_tokens} for the completion). "
                "Please reduce the length of the messages or the completion.",
                "max_tokens" if room >= 1 else "messages",
                "context_length_exceeded",
            )
        max_tokens = min(max_tokens, room)
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=_number(body, "temperature", float, d.temperature, low=0, high=2),
        top_p=_number(body, "top_p", float, d.top_p, low=1e-9, high=1),
        top_k=_number(body, "top_k", int, d.top_k, low=-1),
        repetition_penalty=_number(body, "repetition_penalty", float, 1.0, low=1e-6),
        stop=tuple(_stops(body)),
        stop_token_ids=tuple(stop_ids),
        ignore_eos=bool(body.get("ignore_eos", False)),
        logprobs=logprobs,
        prompt_logprobs=logprobs if echo else None,
    )


def _logprobs_count(body: dict, key: str) -> int:
    value = body.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LOGPROBS:
        raise ApiError(400, f"'{key}' must be an integer from 0 to {MAX_LOGPROBS}, got {value!r}", key)
    return value


def _chat_logprobs(body: dict) -> int | None:
    """Chat's `logprobs: true` and `top_logprobs: k`: the k likeliest tokens at each (None: no log-probs)."""
    wanted = body.get("logprobs")
    if wanted not in (None, True, False):
        raise ApiError(400, f"'logprobs' must be true or false here, got {wanted!r}", "logprobs")
    if body.get("top_logprobs") is None:
        return 0 if wanted else None
    top = _logprobs_count(body, "top_logprobs")
    if not wanted:
        raise ApiError(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs")
    return top


def _common(body: dict) -> tuple[int, bool, bool]:
    _refuse_unsupported(body)
    n = _number(body, "n", int, 1, low=1, high=MAX_N)
    stream = bool(body.get("stream", False))
    options = body.get("stream_options") or {}
    return n, stream, bool(stream and options.get("include_usage"))


def chat_job(body: dict, d: Defaults, prompter: Prompter) -> Job:
    n, stream, include_usage = _common(body)
    try:
        messages = normalize_messages(body.get("messages"))
    except ValueError as e:
        raise ApiError(400, str(e), "messages") from None
    tools = body.get("tools") or None
    if tools is not None and (
        not isinstance(tools, list) or not all(isinstance(t, dict) and t.get("function") for t in tools)
    ):
        raise ApiError(400, "'tools' must be a list of {'type': 'function', 'function': {...}} objects", "tools")
    kwargs = body.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise ApiError(400, "'chat_template_kwargs' must be an object", "chat_template_kwargs")
    try:
        prompt = prompter.prompt_ids(messages, tools, kwargs)
    except Exception as e:  # the template's own error (a role order it refuses, a missing variable)
        raise ApiError(
            400, f"the chat template cannot render these messages: {type(e).__name__}: {e}", "messages"
        ) from None
    parse = tools is not None and body.get("tool_choice") != "none"
    stop_ids = prompter.stop_token_ids if parse else []
    logprobs = _chat_logprobs(body)
    params = _params(body, d, len(prompt), stop_ids, logprobs)
    job = Job("chat", [prompt], params, n, stream, include_usage, list(params.stop), tools if parse else None)
    job.logprobs = logprobs
    return job


def completion_job(body: dict, d: Defaults, tokenizer) -> Job:
    n, stream, include_usage = _common(body)
    prompt = body.get("prompt")
    if isinstance(prompt, str) or (isinstance(prompt, list) and prompt and all(isinstance(p, int) for p in prompt)):
        prompts = [prompt]
    elif isinstance(prompt, list) and prompt and all(isinstance(p, str | list) for p in prompt):
        prompts = prompt
    else:
        raise ApiError(400, "'prompt' must be a string, a list of strings, or token ids", "prompt")
    ids, texts = [], []
    for p in prompts:
        if isinstance(p, str):
            ids.append(tokenizer.encode(p, add_special_tokens=True))
            texts.append(p)
        elif all(isinstance(t, int) for t in p):
            ids.append(list(p))
            texts.append(tokenizer.decode(p))
        else:
            raise ApiError(400, "a token-id prompt must be a list of integers", "prompt")
        if not ids[-1]:
            raise ApiError(400, "a prompt needs at least one token", "prompt")
    echo = bool(body.get("echo"))
    logprobs = None if body.get("logprobs") is None else _logprobs_count(body, "logprobs")
    params = _params(body, d, max(len(p) for p in ids), [], logprobs, echo)
    job = Job("completion", ids, params, n, stream, include_usage, list(params.stop))
    job.logprobs = logprobs
    if echo:
        job.echo_text = texts
        job.echo_only = body.get("max_completion_tokens", body.get("max_tokens")) == 0
    return job


# -- answers ---------------------------------------------------------------------------------------------------


@dataclass
class Answer:
    """One choice, finished."""

    index: int
    text: str | None
    finish_reason: str
    tokens: int
    tool_calls: list[ToolCall] = field(default_factory=list)
    logprobs: dict | None = None  # the OpenAI-shaped log-probs object (trainctl.inference.logprobs)


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def chat_response(job: Job, d: Defaults, answers: list[Answer]) -> dict:
    choices = []
    for a in answers:
        message: dict[str, Any] = {"role": "assistant", "content": a.text}
        if a.tool_calls:
            message["tool_calls"] = [c.to_openai() for c in a.tool_calls]
        choices.append({"index": a.index, "message": message, "logprobs": a.logprobs, "finish_reason": a.finish_reason})
    return {
        "id": f"chatcmpl-{job.id}",
        "object": "chat.completion",
        "created": job.created,
        "model": d.name,
        "choices": choices,
        "usage": usage(sum(len(p) for p in job.prompts), sum(a.tokens for a in answers)),
    }


def completion_response(job: Job, d: Defaults, answers: list[Answer]) -> dict:
    return {
        "id": f"cmpl-{job.id}",
        "object": "text_completion",
        "created": job.created,
        "model": d.name,
        "choices": [
            {"index": a.index, "text": a.text or "", "logprobs": a.logprobs, "finish_reason": a.finish_reason}
            for a in answers
        ],
        "usage": usage(sum(len(p) for p in job.prompts) * job.n, sum(a.tokens for a in answers)),
    }


def chunk(
    job: Job,
    d: Defaults,
    index: int | None,
    delta: dict | None = None,
    finish: str | None = None,
    logprobs: dict | None = None,
) -> dict:
    """One streamed chunk: a choice's delta (chat) or text (completions), with its tokens' log-probs when asked for;
    `index` None for the usage chunk."""
    if job.kind == "chat":
        choices = [] if index is None else [{"index": index, "delta": delta or {}, "logprobs": logprobs}]
        obj, prefix = "chat.completion.chunk", "chatcmpl"
    else:
        text = (delta or {}).get("content", "")
        choices = [] if index is None else [{"index": index, "text": text, "logprobs": logprobs}]
        obj, prefix = "text_completion", "cmpl"
    if choices:
        choices[0]["finish_reason"] = finish
    return {"id": f"{prefix}-{job.id}", "object": obj, "created": job.created, "model": d.name, "choices": choices}


def models_response(d: Defaults, created: int) -> dict:
    return {
        "object": "list",
        "data": [
            {
                "id": d.name,
                "object": "model",
                "created": created,
                "owned_by": "trainctl",
                "max_model_len": d.context_length,
            }
        ],
    }
