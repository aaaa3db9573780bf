"""Generation for `model serve` and `chat` on CPU: trainctl's batched sampler (trainctl.runtime.sampler, the one
`trainctl eval` and the `hf` rollout use), token by token.

`Batch` wraps a BatchSampler and says after each step what every request got since the step before (its new tokens,
and its Completion when it finished): what a streaming caller sends. `Engine` runs a Batch for many concurrent callers
on an asyncio loop, as the `hf` rollout server does: requests queue, one scheduler task steps the batch in a worker
thread, and requests that arrive meanwhile join the running batch before the next step (continuous batching), each
with its own temperature, top-k, top-p, stop strings and max tokens. `stream()` is the synchronous form for one caller
(the terminal chat).

The model is loaded as eval loads it (fp32, eval mode, the generation config's and tokenizer's EOS ids), so a greedy
answer here is the answer eval scored for the same prompt ids.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainctl.runtime.sampler import BatchSampler, Completion, PromptLogprobs, Ranked, SamplingParams


@dataclass
class Update:
    """What one request got in one step: its new tokens, and its Completion when this step finished it; with the
    new tokens' log-probs, the k likeliest at each (params.logprobs), and, in a request's first update, its prompt's
    log-probs (params.prompt_logprobs)."""

    key: Any
    tokens: list[int]
    done: Completion | None = None
    logprobs: list[float] = field(default_factory=list)
    top: list[Ranked] | None = None
    prompt: PromptLogprobs | None = None


@dataclass
class Loaded:
    model: Any
    tokenizer: Any
    eos_ids: set[int]
    folder: Path


def load(folder: Path, attn_implementation: str = "sdpa") -> Loaded:
    """The model, tokenizer and stop ids, as eval's CPU generation loads them."""
    from trainctl.runtime.sampler import load_policy

    model, tokenizer, eos_ids = load_policy(str(folder), attn_implementation)
    return Loaded(model, tokenizer, set(eos_ids), Path(folder))


class Batch:
    """A BatchSampler that reports, after every step, each request's tokens since the last report. Not thread-safe:
    add, cancel and step from one thread at a time (Engine steps in a worker thread, and adds only between steps)."""

    def __init__(self, loaded: Loaded, *, seed: int = 0, max_batch_size: int = 256, max_prefill_tokens: int = 8192):
        import torch

        self.sampler = BatchSampler(
            loaded.model,
            loaded.eos_ids,
            generator=torch.Generator().manual_seed(int(seed)),
            tokenizer=loaded.tokenizer,
            max_batch_size=max_batch_size,
            max_prefill_tokens=max_prefill_tokens,
            pad_id=loaded.tokenizer.pad_token_id or 0,
        )
        self._sent: dict[Any, int] = {}

    @property
    def busy(self) -> bool:
        return self.sampler.busy

    def add(self, prompt_ids: Sequence[int], params: SamplingParams) -> Any:
        key = self.sampler.add(prompt_ids, params)
        self._sent[key] = 0
        return key

    def cancel(self, key: Any) -> None:
        self.sampler.cancel(key)
        self._sent.pop(key, None)

    def reset(self) -> None:
        self.sampler.reset()
        self._sent.clear()

    def step(self) -> list[Update]:
        updates = []
        for key, c in self.sampler.step():
            sent = self._sent.pop(key, 0)
            top = c.top_logprobs[sent:] if c.top_logprobs is not None else None
            prompt = c.prompt_logprobs if sent == 0 else None
            updates.append(Update(key, c.token_ids[sent:], c, c.log_probs[sent:], top, prompt))
        logprobs = self.sampler.partial_logprobs()
        for key, out in self.sampler.partial():
            sent = self._sent.get(key, 0)
            if len(out) > sent:
                logps, tops, prompt = logprobs[key]
                top = tops[sent:] if tops is not None else None
                updates.append(Update(key, list(out[sent:]), None, logps[sent:], top, prompt if sent == 0 else None))
                self._sent[key] = len(out)
        return updates


def stream(batch: Batch, prompt_ids: Sequence[int], params: SamplingParams) -> Iterator[Update]:
    """One request's updates, generated in this thread; the last one carries its Completion. Stopping early (a
    KeyboardInterrupt, a caller that stops iterating) drops the request and every other one of this batch."""
    key = batch.add(prompt_ids, params)
    finished = False
    try:
        while not finished:
            for update in batch.step():
                if update.key == key:
                    finished = update.done is not None
                    yield update
    finally:
        if not finished:
            batch.reset()  # an interrupted step may have left the batch half-updated


@dataclass
class _Request:
    prompt_ids: list[int]
    params: SamplingParams
    queue: asyncio.Queue
    key: Any = None
    finished: bool = False


@dataclass
class Stats:
    requests: int = 0
    tokens: int = 0
    seconds: float = 0.0  # time spent in steps
    largest_batch: int = 0


class Engine:
    """Concurrent requests on one asyncio loop, sampled as one continuous batch (see the module's docstring)."""

    def __init__(self, batch: Batch):
        self.batch = batch
        self._incoming: list[_Request] = []
        self._running: dict[Any, _Request] = {}
        self._cancelled: list[_Request] = []
        self._scheduler: asyncio.Task | None = None
        self.stats = Stats()

    async def stream(self, prompt_ids: Sequence[int], params: SamplingParams) -> AsyncIterator[Update]:
        """The request's updates as they come; the last carries its Completion. A caller that stops listening
        (a client that hung up) has its request dropped from the batch at the next step."""
        request = _Request([int(t) for t in prompt_ids], params, asyncio.Queue())
        self._incoming.append(request)
        self.stats.requests += 1
        if self._scheduler is None:
            self._scheduler = asyncio.get_running_loop().create_task(self._schedule())
        try:
            while True:
                item = await request.queue.get()
                if isinstance(item, BaseException):
                    request.finished = True
                    raise item
                if item.done is not None:
                    request.finished = True
                yield item
                if request.finished:
                    return
        finally:
            if not request.finished:
                self._cancel(request)

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Completion:
        async for update in self.stream(prompt_ids, params):
            if update.done is not None:
                return update.done
        raise RuntimeError("the request ended without a completion")  # stream() always ends with one

    def _cancel(self, request: _Request) -> None:
        request.finished = True
        if request in self._incoming:
            self._incoming.remove(request)
        elif request.key is not None:
            self._cancelled.append(request)  # the batch may be stepping in its thread: dropped before the next step

    async def _schedule(self) -> None:
        import time

        try:
            while self._incoming or self._cancelled or self.batch.busy:
                for request in self._cancelled:
                    if self._running.pop(request.key, None) is not None:
                        self.batch.cancel(request.key)
                self._cancelled.clear()
                for request in self._incoming:
                    request.key = self.batch.add(request.prompt_ids, request.params)
                    self._running[request.key] = request
                self._incoming.clear()
                if not self.batch.busy:
                    continue
                self.stats.largest_batch = max(self.stats.largest_batch, len(self._running))
                start = time.perf_counter()
                updates = await asyncio.to_thread(self.batch.step)
                self.stats.seconds += time.perf_counter() - start
                for update in updates:
                    self.stats.tokens += len(update.tokens)
                    request = self._running.get(update.key)
                    if request is None:
                        continue
                    if update.done is not None:
                        del self._running[update.key]
                    if not request.finished:
                        request.queue.put_nowait(update)
        except BaseException as err:  # a failed step fails the requests in it, not the server
            for request in [*self._running.values(), *self._incoming]:
                request.queue.put_nowait(err if isinstance(err, Exception) else RuntimeError("the server is stopping"))
            self._running.clear()
            self._incoming.clear()
            self._cancelled.clear()
            self.batch.reset()
            if not isinstance(err, Exception):
                raise
        finally:
            self._scheduler = None
