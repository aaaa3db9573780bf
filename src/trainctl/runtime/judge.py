"""reward=judge: an LLM judge over any OpenAI-compatible endpoint scores each response, or ranks the responses to the
same prompt against each other (RULER-style: relative scores in [0, 1] for the group).

Inside a verl run:
  - `JudgeRewardManager` is the reward manager verl loads with importlib in each reward worker; verl calls its
    `run_single` once per response, as each finishes.
  - the responses to one prompt can reach different reward workers, so they meet in one Ray actor, `JudgeHub`
    (named, one per run): it collects a prompt's group (rollout.n responses, by the sample's uid), asks the judge
    once, and answers every member. In single mode it asks once per response.
  - the judge's failures (garbage it cannot parse, timeouts, HTTP errors) give the failure score and are counted per
    training step (trainctl.runtime.reward_metrics logs them); they never stop the run. Each request is written to
    `<run>/reward/judge.jsonl` (scores, failure, seconds, the answer's start): never the key.
  - with no `reward.url`, the hub serves `reward.judge` itself with `transformers serve` on 127.0.0.1.

The OpenAI client (the `openai` package) speaks to OpenAI, vLLM, SGLang, Ollama, LiteLLM and `transformers serve`
alike, with its own retries and timeouts.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainctl.runtime.lazy import lazy_classes
from trainctl.runtime.reward_model import prompt_messages, response_text

HUB = "trainctl_judge"
MANAGER = "JudgeRewardManager"
ANSWER_KEPT = 2000  # characters of each answer kept in judge.jsonl


# -- prompts ----------------------------------------------------------------------------------------------------


def load_template(path: str):
    """A Jinja template that fails on an undefined variable instead of rendering it empty."""
    import jinja2

    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False, trim_blocks=True
    )
    return env.from_string(Path(path).read_text())


def render(template, messages: list[dict], responses: list[str], rubric: str | None, ground_truth: Any) -> str:
    """The judge's prompt. Variables: messages (the prompt's chat messages), responses (one in single mode),
    response (the first), n, rubric (or null), ground_truth (the row's reference answer, or null)."""
    return template.render(
        messages=messages,
        responses=responses,
        response=responses[0] if responses else "",
        n=len(responses),
        rubric=rubric,
        ground_truth=ground_truth if ground_truth not in ("", None) else None,
    )


def response_format(mode: str, n: int) -> dict:
    """The JSON schema of the answer (OpenAI structured outputs; vLLM and SGLang guided decoding)."""
    entry = {
        "type": "object",
        "properties": {"id": {"type": "integer"}, "explanation": {"type": "string"}, "score": {"type": "number"}},
        "required": ["id", "explanation", "score"],
        "additionalProperties": False,
    }
    if mode == "single":
        schema = {
            "type": "object",
            "properties": {"explanation": {"type": "string"}, "score": {"type": "number"}},
            "required": ["explanation", "score"],
            "additionalProperties": False,
        }
    else:
        schema = {
            "type": "object",
            "properties": {"scores": {"type": "array", "items": entry, "minItems": n, "maxItems": n}},
            "required": ["scores"],
            "additionalProperties": False,
        }
    return {"type": "json_schema", "json_schema": {"name": "scores", "schema": schema, "strict": True}}


# -- parsing ----------------------------------------------------------------------------------------------------

_THINK = re.compile(r"<think>.*?</think>", re.S)
_PAIR = re.compile(r"(?:response|id|#)?\s*(\d+)\s*(?:\)|\]|:|-|=)\s*(?:score\s*[:=]?\s*)?(-?\d+(?:\.\d+)?)", re.I)
_SCORE = re.compile(r"score\W{0,3}(-?\d+(?:\.\d+)?)", re.I)


def _json_values(text: str):
    """Every top-level JSON object or array in a text, in order (prose, code fences and all around them)."""
    decoder = json.JSONDecoder()
    i = 0
    while i < len(text):
        starts = [j for j in (text.find("{", i), text.find("[", i)) if j != -1]
        if not starts:
            return
        i = min(starts)
        try:
            value, end = decoder.raw_decode(text, i)
        except ValueError:
            i += 1
            continue
        yield value
        i = end


def _unit(x: Any) -> float | None:
    """A score in [0, 1], or None (not a number, not finite, out of range)."""
    if isinstance(x, bool):
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and 0.0 <= v <= 1.0 else None


def _id(x: Any) -> int | None:
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return x
    m = re.fullmatch(r"\D*(\d+)", str(x).strip())
    return int(m.group(1)) if m else None


def _group_scores(value: Any, n: int) -> list[float] | None:
    entries = value.get("scores") if isinstance(value, dict) else value
    if isinstance(entries, dict):  # {"1": 0.8, "2": 0.1}
        entries = [{"id": k, "score": v} for k, v in entries.items()]
    if not isinstance(entries, list) or len(entries) != n:
        return None
    if all(not isinstance(e, dict) for e in entries):  # [0.8, 0.1]: in order (only as the whole answer, see below)
        scores = [_unit(e) for e in entries]
        return None if None in scores else scores  # type: ignore[return-value]
    by_id: dict[int, float] = {}
    for e in entries:
        if not isinstance(e, dict):
            return None
        i = _id(e.get("id", e.get("trajectory_id", e.get("response_id"))))
        s = _unit(e.get("score"))
        if i is None or s is None or i in by_id:
            return None
        by_id[i] = s
    if sorted(by_id) != list(range(1, n + 1)):
        return None
    return [by_id[i] for i in range(1, n + 1)]


def parse_group(text: str | None, n: int) -> list[float] | None:
    """The scores of responses 1..n, or None when the answer holds no complete, valid set of them.

    Read: a JSON object {"scores": [{"id", "score"}, ...]} (or a list of numbers, or {"1": score, ...}) anywhere in
    the text; else lines that pair each id with a score ("2: 0.7", "Response 2 - score 0.7"), one per id."""
    if not text:
        return None
    text = _THINK.sub("", text).strip()
    bare = text.removeprefix("```json").removeprefix("```").removesuffix("```").strip()
    for value in _json_values(text):
        # a bare list of numbers counts only as the whole answer: a stray "[1, 0]" in prose is no verdict
        if isinstance(value, list) and not bare.startswith("["):
            continue
        scores = _group_scores(value, n)
        if scores is not None:
            return scores
    found: dict[int, float] = {}
    for m in _PAIR.finditer(text):
        i, s = int(m.group(1)), _unit(m.group(2))
        if s is None or not 1 <= i <= n or i in found:
            return None
        found[i] = s
    return [found[i] for i in range(1, n + 1)] if sorted(found) == list(range(1, n + 1)) else None


def parse_single(text: str | None) -> float | None:
    """One score: {"score": x} anywhere in the text, else "score: x"."""
    if not text:
        return None
    text = _THINK.sub("", text)
    for value in _json_values(text):
        if isinstance(value, dict) and "score" in value:
            return _unit(value["score"])
    found = [_unit(m.group(1)) for m in _SCORE.finditer(text)]
    return found[0] if len(found) == 1 else None


# -- the client -------------------------------------------------------------------------------------------------


@dataclass
class Verdict:
    scores: list[float] | None  # None: the judge failed
    failure: str | None = None  # unparsed | timeout | error
    detail: str = ""
    answer: str = ""
    seconds: float = 0.0


class JudgeClient:
    """One OpenAI-compatible endpoint and model; `ask` never raises for the judge's failures."""

    def __init__(self, url: str, model: str, api_key: str | None, timeout_s: float, retries: int, **options):
        from openai import AsyncOpenAI

        # the client keeps the key in memory only; it never appears in a message of ours
        self.client = AsyncOpenAI(base_url=url, api_key=api_key or "EMPTY", timeout=timeout_s, max_retries=retries)
        self.model = model
        self.max_tokens = int(options.get("max_tokens", 1024))
        self.temperature = float(options.get("temperature", 0.0))
        self.json_schema = bool(options.get("json_schema", True))
        self.limit = asyncio.Semaphore(int(options.get("concurrency", 8)))
        self.token_key = "max_tokens"

    async def complete(self, prompt: str, max_tokens: int, response_format: dict | None = None) -> str:
        """One chat completion's text. OpenAI's reasoning models refuse max_tokens: then max_completion_tokens."""
        import openai

        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": self.temperature,
        }
        if response_format is not None:
            kwargs["response_format"] = response_format
        try:
            out = await self.client.chat.completions.create(**kwargs, **{self.token_key: max_tokens})
        except openai.BadRequestError as e:
            if self.token_key == "max_tokens" and "max_completion_tokens" in str(e):
                self.token_key = "max_completion_tokens"
                out = await self.client.chat.completions.create(**kwargs, **{self.token_key: max_tokens})
            else:
                raise
        return (out.choices[0].message.content or "") if out.choices else ""

    async def ask(self, prompt: str, mode: str, n: int) -> Verdict:
        import openai

        fmt = response_format(mode, n) if self.json_schema else None
        start = time.monotonic()
        async with self.limit:
            try:
                answer = await self.complete(prompt, self.max_tokens, fmt)
            except openai.APITimeoutError:
                return Verdict(None, "timeout", "no answer in time", seconds=time.monotonic() - start)
            except openai.APIStatusError as e:
                return Verdict(None, "error", f"HTTP {e.status_code}", seconds=time.monotonic() - start)
            except (openai.OpenAIError, OSError, ValueError) as e:
                return Verdict(None, "error", type(e).__name__, seconds=time.monotonic() - start)
        seconds = time.monotonic() - start
        if mode == "single":
            one = parse_single(answer)
            scores = None if one is None else [one]
        else:
            scores = parse_group(answer, n)
        if scores is None:
            return Verdict(None, "unparsed", "no valid scores in the answer", answer, seconds)
        return Verdict(scores, answer=answer, seconds=seconds)


def probe(url: str, model: str, api_key: str | None, timeout_s: float, json_schema: bool) -> None:
    """Ask the endpoint one tiny question the way the run will (raises the client's error when it cannot)."""

    async def run():
        client = JudgeClient(url, model, api_key, timeout_s, 0, json_schema=json_schema, max_tokens=16)
        try:
            fmt = response_format("group", 2) if json_schema else None
            await client.complete("Reply with the word OK.", 16, fmt)
        finally:
            await client.client.close()

    asyncio.run(run())


# -- serving a local judge ----------------------------------------------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """In the server's process: end when the process that started it ends (Linux), so no server outlives its run."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def serve_local(model_path: str, log_path: Path, timeout_s: float = 600.0):
    """Start `transformers serve` for a local judge on 127.0.0.1; returns (process, base URL) once it answers."""
    import subprocess
    import sys
    import urllib.error
    import urllib.request

    port = _free_port()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = log_path.open("ab")
    argv = [sys.executable, "-m", "transformers.cli.transformers", "serve", model_path]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"transformers serve {model_path} exited with {proc.returncode}: see {log_path}")
        body = json.dumps({"model": model_path, "messages": [{"role": "user", "content": "OK"}], "max_tokens": 1})
        req = urllib.request.Request(
            f"{url}/chat/completions", data=body.encode(), headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=30):
                return proc, url
        except (urllib.error.URLError, OSError):
            time.sleep(1)
    proc.terminate()
    raise RuntimeError(f"transformers serve {model_path} did not answer within {timeout_s:.0f} s: see {log_path}")


# -- the hub: where a prompt's responses meet -------------------------------------------------------------------


@dataclass
class _Group:
    step: int
    ground_truth: Any
    messages: list[dict]
    members: dict[int, tuple[str, asyncio.Future]] = field(default_factory=dict)
    full: asyncio.Event = field(default_factory=asyncio.Event)


class JudgeHub:
    """One per run (a named Ray actor): groups responses by prompt, asks the judge, counts its failures per step."""

    def __init__(self, settings: dict, group_size: int):
        self.settings = settings
        self.mode = settings["mode"]
        self.group_size = max(1, int(group_size)) if self.mode == "group" else 1
        self.failure_score = float(settings["failure_score"])
        self.template = load_template(settings["template"])
        run_dir = Path(settings["run_dir"])
        self.log_path = run_dir / "reward" / "judge.jsonl"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.server = None
        url, model = settings.get("url"), settings["model"]
        if settings.get("serve"):
            self.server, url = serve_local(model, run_dir / "reward" / "judge-server.log")
        key = None
        if settings.get("key_env"):
            key = os.environ.get(settings["key_env"])
            if not key:
                raise RuntimeError(
                    f"reward.key_env: {settings['key_env']} is not set in the reward worker's environment "
                    "(set it where trainctl runs; for a Ray job, trainctl forwards variables whose name says secret)"
                )
        options = {k: settings[k] for k in ("max_tokens", "temperature", "json_schema", "concurrency")}
        self.client = JudgeClient(url, model, key, float(settings["timeout_s"]), int(settings["retries"]), **options)
        self.groups: dict[str, _Group] = {}
        self.counts: dict[int, Counter] = defaultdict(Counter)
        self.seconds: dict[int, float] = defaultdict(float)

    async def score(self, key: str, session: int, step: int, messages: list[dict], response: str, truth: Any):
        """(score, judged) for one response; waits for the rest of its group in group mode."""
        if self.group_size == 1:
            return (await self._judge(step, key, messages, [response], truth))[0]
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = _Group(step, truth, messages)
            asyncio.get_running_loop().create_task(self._judge_group(key, group))
        future = asyncio.get_running_loop().create_future()
        if session in group.members:  # the same place twice (a retried request): keep both, never orphan one
            session = max(group.members) + 1
        group.members[session] = (response, future)
        if len(group.members) >= self.group_size:
            group.full.set()
        return await future

    async def _judge_group(self, key: str, group: _Group) -> None:
        try:
            await asyncio.wait_for(group.full.wait(), float(self.settings["group_wait_s"]))
        except TimeoutError:
            self.counts[group.step]["partial_groups"] += 1
        self.groups.pop(key, None)  # a later response of this prompt starts a group of its own
        sessions = sorted(group.members)
        responses = [group.members[s][0] for s in sessions]
        try:
            results = await self._judge(group.step, key, group.messages, responses, group.ground_truth)
        except Exception:  # never leave a response waiting: every member gets the failure score
            results = [(self.failure_score, False)] * len(sessions)
        for s, result in zip(sessions, results, strict=True):
            future = group.members[s][1]
            if not future.done():
                future.set_result(result)

    async def _judge(self, step: int, key: str, messages, responses: list[str], truth) -> list[tuple[float, bool]]:
        try:
            prompt = render(self.template, messages, responses, self.settings.get("rubric"), truth)
        except Exception as e:  # a template that breaks on this row: a failure like any other
            verdict = Verdict(None, "error", f"template: {e}")
        else:
            try:
                verdict = await self.client.ask(prompt, self.mode, len(responses))
            except Exception as e:  # whatever goes wrong with the judge is a counted failure, never the run's end
                verdict = Verdict(None, "error", type(e).__name__)
        counts = self.counts[step]
        counts["calls"] += 1
        counts["responses"] += len(responses)
        self.seconds[step] += verdict.seconds
        if verdict.scores is None:
            counts["failures"] += 1
            counts[verdict.failure or "error"] += 1
        self._log(step, key, responses, verdict)
        if verdict.scores is None:
            return [(self.failure_score, False)] * len(responses)
        return [(s, True) for s in verdict.scores]

    def _log(self, step: int, key: str, responses: list[str], verdict: Verdict) -> None:
        line = {
            "step": step,
            "uid": key,
            "n": len(responses),
            "scores": verdict.scores,
            "failure": verdict.failure,
            "detail": verdict.detail,
            "seconds": round(verdict.seconds, 3),
            "answer": verdict.answer[:ANSWER_KEPT],
        }
        with self.log_path.open("a") as f:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")

    def metrics(self, step: int) -> dict[str, float]:
        """The judge's figures for the responses sampled at `step` (and any earlier step not yet reported)."""
        out: Counter = Counter()
        seconds = 0.0
        for s in [s for s in self.counts if s <= step]:
            out.update(self.counts.pop(s))
            seconds += self.seconds.pop(s, 0.0)
        calls = out["calls"]
        return {
            "reward/judge/calls": float(calls),
            "reward/judge/failures": float(out["failures"]),
            "reward/judge/failure_rate": out["failures"] / calls if calls else 0.0,
            "reward/judge/unparsed": float(out["unparsed"]),
            "reward/judge/timeouts": float(out["timeout"]),
            "reward/judge/errors": float(out["error"]),
            "reward/judge/partial_groups": float(out["partial_groups"]),
            "reward/judge/seconds": seconds / calls if calls else 0.0,
        }

    def shutdown(self) -> None:
        if self.server is not None and self.server.poll() is None:
            self.server.terminate()


def hub(settings: dict, group_size: int):
    """The run's hub actor (created by the first reward worker that asks)."""
    import ray

    actor = ray.remote(JudgeHub)
    # no CPU reserved: it waits on the network, and verl's pools may hold every CPU Ray has
    return actor.options(name=HUB, get_if_exists=True, num_cpus=0, max_concurrency=1000).remote(settings, group_size)


def _manager_class():
    from omegaconf import OmegaConf
    from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

    class JudgeRewardManager(RewardManagerBase):
        """verl reward manager: the LLM judge's score of each response (trainctl.runtime.judge)."""

        def __init__(self, config, tokenizer, compute_score, reward_router_address=None, reward_model_tokenizer=None):
            super().__init__(config, tokenizer, compute_score)
            settings = OmegaConf.to_container(config.reward.reward_kwargs.trainctl, resolve=True)
            self.hub = hub(settings, int(config.actor_rollout_ref.rollout.n))
            self.sessions: Counter = Counter()

        async def run_single(self, data) -> dict:
            item = data[-1:][0]
            extra = item.non_tensor_batch
            messages = prompt_messages(item)
            response = await self.loop.run_in_executor(None, response_text, item, self.tokenizer)
            # the sample's prompt id and its place in the group; without them (verl's colocated path), the prompt
            key = str(extra.get("uid", json.dumps(messages, sort_keys=True, default=str)))
            session = extra.get("session_id")
            if session is None:
                session = self.sessions[key]
                self.sessions[key] += 1
            truth = (extra.get("reward_model") or {}).get("ground_truth")
            step = int(extra.get("global_steps", 0) or 0)
            score, judged = await self.hub.score.remote(key, int(session), step, messages, response, truth)
            return {"reward_score": score, "reward_extra_info": {"judged": float(judged)}}

    return JudgeRewardManager


# verl loads the manager by module and name (reward.reward_manager.source=importlib): built on first access
__getattr__ = lazy_classes(__name__, {MANAGER: _manager_class})
