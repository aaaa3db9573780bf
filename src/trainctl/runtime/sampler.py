"""Batched sampling from a transformers causal LM on CPU: many requests, one forward pass per token for all of them.

Used by the `hf` rollout server (trainctl.runtime.hf_rollout) and offline (`generate(...)`, e.g. for evaluation).

Continuous batching over one left-padded KV cache, rather than a fixed padded batch: the rollout's requests
arrive one by one from verl's agent-loop workers (and, in multi-turn loops, come back after each tool call), so
requests must be able to join a running batch and finished ones must leave it, or every request would wait for the
slowest one. vLLM-style paged attention is not needed at the sizes a CPU runs; what is kept instead:
  - one DynamicCache whose rows are left-padded to a common length; an attention mask marks the padding, and
    position ids count each row's own tokens, so a row computes what it would compute alone;
  - a joining group is prefilled together (left-padded, one forward pass), then its cache is padded and stacked
    onto the running one; rows that finish are dropped and padding columns no row needs any more are cut off;
  - the cache always holds every token of a row but the last sampled one, which is the next step's input.
Why not transformers' own continuous batching (transformers 5.10 `generate_batch` / `init_continuous_batching`):
greedy or sampled is one switch for the whole batch (`do_sample`), per-request temperature/top-k/top-p exist only
where the shared GenerationConfig already turned those processors on, its log-probs are of the processed
distribution (verl compares the rollout's log-probs with the actor's raw ones), there are no stop strings, and it
samples from torch's global generator. Hence this module (about 300 lines).

Settings are per request inside a batch (temperature, where 0 is greedy; top-k; top-p; repetition penalty;
max tokens; stop token ids; stop strings; ignore_eos), as vLLM defines them. Log-probs are of the raw logits (vLLM's
default `raw_logprobs`): what the policy assigns to each sampled token, before any penalty, temperature or filter.
A request may also ask, as vLLM's `logprobs` and `prompt_logprobs` do, for the k likeliest tokens at each sampled
position and for the log-prob of every prompt token given the ones before it (what `model serve` answers to `echo`
with `logprobs`, and lm-eval's loglikelihood tasks read): the prompt's come from the same prefill pass, with the
logits of every position kept for that group.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

# vLLM SamplingParams keys this sampler implements; and keys it accepts only at their neutral value
_KEYS = {"temperature", "top_k", "top_p", "repetition_penalty", "max_tokens", "max_new_tokens", "stop"}
_KEYS |= {"stop_token_ids", "ignore_eos", "logprobs"}
_NEUTRAL = {"n": 1, "presence_penalty": 0.0, "frequency_penalty": 0.0, "min_p": 0.0, "min_tokens": 0}
# output-formatting keys that change nothing here (token ids out, no text)
_IGNORED = {"skip_special_tokens", "spaces_between_special_tokens", "include_stop_str_in_output", "detokenize"}


@dataclass(frozen=True)
class SamplingParams:
    """One request's settings, with vLLM's meanings. temperature 0 is greedy; top_k <= 0 and top_p >= 1 are off."""

    max_tokens: int
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    stop_token_ids: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    # vLLM's: the k likeliest tokens at each sampled position (0: only the sampled token's, which every Completion
    # has); None: none
    logprobs: int | None = None
    # vLLM's: each prompt token's log-prob given the tokens before it (the first has none), and the k likeliest there
    prompt_logprobs: int | None = None

    def __post_init__(self):
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        for key in ("logprobs", "prompt_logprobs"):
            if (getattr(self, key) or 0) < 0:
                raise ValueError(f"{key} must be >= 0, got {getattr(self, key)}")

    @classmethod
    def from_request(cls, params: dict[str, Any], max_tokens: int) -> SamplingParams:
        """From the sampling_params dict verl's agent loop sends (its max_tokens already resolved by the caller).
        A setting this sampler does not implement is refused rather than silently ignored."""
        unknown = {k: v for k, v in params.items() if v is not None and k not in _KEYS | _IGNORED}
        unknown = {k: v for k, v in unknown.items() if not (k in _NEUTRAL and v == _NEUTRAL[k])}
        if unknown:
            raise NotImplementedError(
                f"trainctl's hf rollout does not implement the sampling parameters {unknown}; "
                f"it implements {sorted(_KEYS)}"
            )

        def get(key, default):
            value = params.get(key)
            return default if value is None else value

        stop = get("stop", ())
        return cls(
            max_tokens=int(max_tokens),
            temperature=float(get("temperature", 1.0)),
            top_k=int(get("top_k", -1)),
            top_p=float(get("top_p", 1.0)),
            repetition_penalty=float(get("repetition_penalty", 1.0)),
            stop_token_ids=tuple(int(t) for t in get("stop_token_ids", ())),
            stop=(stop,) if isinstance(stop, str) else tuple(stop),
            ignore_eos=bool(get("ignore_eos", False)),
        )


# the k likeliest tokens at one position: (token id, raw log-prob), likeliest first
Ranked = list[tuple[int, float]]


@dataclass
class PromptLogprobs:
    """SamplingParams.prompt_logprobs' answer: per prompt token, its log-prob given the tokens before it and the k
    likeliest tokens there; None for the first token (nothing comes before it)."""

    token_logprobs: list[float | None]
    top: list[Ranked | None]


@dataclass
class Completion:
    """A finished request. finish_reason is vLLM's: "stop" (an EOS or stop token, or a stop string; the token
    that stopped it is included), "length" (max_tokens reached) or "abort" (BatchSampler.abort: the tokens so far);
    stop_reason is the stop token id or string.
    top_logprobs (per sampled token) and prompt_logprobs are there when the request asked for them."""

    token_ids: list[int]
    log_probs: list[float]
    finish_reason: str
    stop_reason: int | str | None = None
    top_logprobs: list[Ranked] | None = None
    prompt_logprobs: PromptLogprobs | None = None


@dataclass
class _Row:
    key: Any
    prompt: list[int]
    params: SamplingParams
    stop_ids: frozenset[int]
    out: list[int] = field(default_factory=list)
    logps: list[float] = field(default_factory=list)
    n_cached: int = 0  # tokens of this row in the KV cache (the last sampled one is not, yet)
    tops: list[Ranked] | None = None  # params.logprobs' answer, per sampled token
    prompt_logprobs: PromptLogprobs | None = None


class BatchSampler:
    """Continuous batching over one model: `add` requests, call `step` until `busy` is False; each step returns the
    requests it finished. Not thread-safe: one caller at a time (the rollout server adds only between steps)."""

    def __init__(
        self,
        model,
        eos_ids: Iterable[int],
        *,
        generator: torch.Generator | None = None,
        tokenizer=None,
        max_batch_size: int = 256,
        max_prefill_tokens: int = 8192,
        pad_id: int = 0,
        max_prompt_logits: int = 2**26,
    ):
        self.model = model
        self.eos_ids = frozenset(int(e) for e in eos_ids)
        self.generator = generator
        self.tokenizer = tokenizer  # only needed for stop strings
        self.max_batch_size = max(1, int(max_batch_size))
        self.max_prefill_tokens = max(1, int(max_prefill_tokens))
        # a prefill that keeps every position's logits (a request wants its prompt's log-probs) holds
        # tokens x vocabulary floats: its group is cut to this many floats (256 MB), one request at the least
        vocab = getattr(getattr(model, "config", None), "vocab_size", None) or 1
        self.max_prompt_logits_tokens = max(1, int(max_prompt_logits) // int(vocab))
        self.pad_id = int(pad_id)
        self.waiting: list[_Row] = []
        self.rows: list[_Row] = []  # the running batch, in cache row order
        self.cache = None
        self.mask: torch.Tensor | None = None  # [rows, cache columns]: 1 where a row has a real token
        self.steps = 0  # forward passes that decoded (not prefills)
        self.largest_batch = 0  # the most requests that got a token in one step
        self._keys = itertools.count()
        self._logits_to_keep = "logits_to_keep" in inspect.signature(model.forward).parameters

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.rows)

    def add(self, prompt_ids: Sequence[int], params: SamplingParams, key: Any = None) -> Any:
        """Queue a request; it joins the batch at the next step. Returns its key (given, or a new int)."""
        if not prompt_ids:
            raise ValueError("a prompt needs at least one token")
        if params.stop and self.tokenizer is None:
            raise ValueError("stop strings need a tokenizer: BatchSampler(..., tokenizer=...)")
        key = next(self._keys) if key is None else key
        stop_ids = frozenset(params.stop_token_ids) | (frozenset() if params.ignore_eos else self.eos_ids)
        row = _Row(key, [int(t) for t in prompt_ids], params, stop_ids)
        row.tops = [] if params.logprobs else None
        self.waiting.append(row)
        return key

    def reset(self) -> None:
        """Forget every request (after a failed step)."""
        self.waiting, self.rows, self.cache, self.mask = [], [], None, None

    def cancel(self, key: Any) -> bool:
        """Drop a request, waiting or running (its caller went away); True if it was here. Call between steps."""
        for i, row in enumerate(self.waiting):
            if row.key == key:
                del self.waiting[i]
                return True
        keep = [i for i, row in enumerate(self.rows) if row.key != key]
        if len(keep) == len(self.rows):
            return False
        self._drop(keep)
        return True

    def abort(self) -> list[tuple[Any, Completion]]:
        """Stop every request, running or waiting, and forget it (vLLM's abort; call between steps): each one's
        tokens so far with their log-probs, finish_reason "abort" (none yet for a request still waiting)."""
        stopped = [
            (r.key, Completion(r.out, r.logps, "abort", top_logprobs=r.tops, prompt_logprobs=r.prompt_logprobs))
            for r in [*self.rows, *self.waiting]
        ]
        self.reset()
        return stopped

    def partial(self) -> list[tuple[Any, list[int]]]:
        """(key, tokens sampled so far) of every running request: what a streaming caller sends between steps."""
        return [(row.key, row.out) for row in self.rows]

    def partial_logprobs(self) -> dict[Any, tuple[list[float], list[Ranked] | None, PromptLogprobs | None]]:
        """key -> a running request's log-probs so far: of each sampled token, the k likeliest at each (when asked
        for), and its prompt's (when asked for)."""
        return {row.key: (row.logps, row.tops, row.prompt_logprobs) for row in self.rows}

    def step(self) -> list[tuple[Any, Completion]]:
        """Admit waiting requests (one prefill pass per group), then one decode pass for the whole batch."""
        finished: list[tuple[Any, Completion]] = []
        running, admitted = len(self.rows), 0
        with torch.inference_mode():
            while self.waiting and len(self.rows) < self.max_batch_size:
                admitted += self._admit(finished)
            if self.rows:
                finished += self._decode()
        # requests that got a token in this step: the running ones, and every one admitted (first token)
        self.largest_batch = max(self.largest_batch, running + admitted)
        return finished

    # --- admission: prefill a group of new requests, then stack its cache onto the running one ---

    def _take_group(self) -> list[_Row]:
        room = self.max_batch_size - len(self.rows)
        group: list[_Row] = []
        longest, all_logits = 0, False
        for row in self.waiting[:room]:
            longest_then = max(longest, len(row.prompt))
            all_logits_then = all_logits or row.params.prompt_logprobs is not None
            limit = self.max_prefill_tokens
            if all_logits_then:
                limit = min(limit, self.max_prompt_logits_tokens)
            if group and longest_then * (len(group) + 1) > limit:
                break
            group.append(row)
            longest, all_logits = longest_then, all_logits_then
        del self.waiting[: len(group)]
        return group

    def _admit(self, finished: list[tuple[Any, Completion]]) -> int:
        """Prefill the next group of waiting requests; returns how many were admitted."""
        from transformers import DynamicCache

        group = self._take_group()
        width = max(len(r.prompt) for r in group)
        ids = torch.full((len(group), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(group), width), dtype=torch.long)
        for i, row in enumerate(group):
            ids[i, width - len(row.prompt) :] = torch.tensor(row.prompt)
            mask[i, width - len(row.prompt) :] = 1
            row.n_cached = len(row.prompt)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache()
        every_position = any(row.params.prompt_logprobs is not None for row in group)
        # GRPO samples each prompt n times, as n requests: a prompt is prefilled once and its cache and logits copied
        # to each of its rows (on SmolLM2 the prefill of 64 prompts of ~55 tokens was most of a step's generation)
        slot: dict[tuple[int, ...], int] = {}  # a prompt's row in the prefill pass
        firsts: list[int] = []  # each prompt's first row in the group
        for i, row in enumerate(group):
            if tuple(row.prompt) not in slot:
                slot[tuple(row.prompt)] = len(firsts)
                firsts.append(i)
        if len(firsts) < len(group):
            unique, which = torch.tensor(firsts), torch.tensor([slot[tuple(row.prompt)] for row in group])
            logits = self._forward(ids[unique], mask[unique], positions[unique], cache, every_position)[which]
            for layer in cache.layers:
                layer.batch_select_indices(which)
        else:
            logits = self._forward(ids, mask, positions, cache, every_position)
        if every_position:
            for i, row in enumerate(group):
                if row.params.prompt_logprobs is not None:
                    row.prompt_logprobs = _prompt_logprobs(logits[i, width - len(row.prompt) :], row)
            logits = logits[:, -1].float()
        tokens = self._sample(logits, group)
        done, keep = self._record(group, tokens)
        finished += done
        if keep:
            self._stack(cache, mask, group, keep)
        return len(group)

    def _stack(self, cache, mask: torch.Tensor, group: list[_Row], keep: list[int]) -> None:
        import torch.nn.functional as F

        index = torch.tensor(keep)
        mask = mask[index]
        for layer in cache.layers:
            layer.batch_select_indices(index)
        if self.cache is None:
            self.cache, self.mask = cache, mask
        else:
            width = max(self.mask.shape[1], mask.shape[1])
            pad_old, pad_new = width - self.mask.shape[1], width - mask.shape[1]
            for old, new in zip(self.cache.layers, cache.layers, strict=True):
                old.keys = torch.cat([F.pad(old.keys, (0, 0, pad_old, 0)), F.pad(new.keys, (0, 0, pad_new, 0))])
                old.values = torch.cat([F.pad(old.values, (0, 0, pad_old, 0)), F.pad(new.values, (0, 0, pad_new, 0))])
            self.mask = torch.cat([F.pad(self.mask, (pad_old, 0)), F.pad(mask, (pad_new, 0))])
        self.rows += [group[i] for i in keep]

    # --- one token for every running row ---

    def _decode(self) -> list[tuple[Any, Completion]]:
        ids = torch.tensor([[row.out[-1]] for row in self.rows], dtype=torch.long)
        positions = torch.tensor([[row.n_cached] for row in self.rows], dtype=torch.long)
        self.mask = torch.cat([self.mask, torch.ones((len(self.rows), 1), dtype=self.mask.dtype)], dim=1)
        logits = self._forward(ids, self.mask, positions, self.cache)
        for row in self.rows:
            row.n_cached += 1
        self.steps += 1
        tokens = self._sample(logits, self.rows)
        finished, keep = self._record(self.rows, tokens)
        if len(keep) < len(self.rows):
            self._drop(keep)
        return finished

    def _drop(self, keep: list[int]) -> None:
        if not keep:
            self.rows, self.cache, self.mask = [], None, None
            return
        index = torch.tensor(keep)
        self.rows = [self.rows[i] for i in keep]
        self.mask = self.mask[index]
        # padding columns that no remaining row uses any more
        first = int(self.mask.any(0).long().argmax())
        if first:
            self.mask = self.mask[:, first:]
        for layer in self.cache.layers:
            layer.keys = layer.keys[index, :, first:]
            layer.values = layer.values[index, :, first:]

    def _forward(self, ids, mask, positions, cache, every_position: bool = False) -> torch.Tensor:
        """The last position's logits [rows, vocab] (fp32); with every_position, every position's [rows, len, vocab]
        as the model returns them."""
        kwargs = {"logits_to_keep": 0 if every_position else 1} if self._logits_to_keep else {}
        out = self.model(
            input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True, **kwargs
        )
        return out.logits if every_position else out.logits[:, -1].float()

    # --- choosing tokens, and when to stop ---

    def _sample(self, logits: torch.Tensor, rows: list[_Row]) -> list[tuple[int, float, Ranked | None]]:
        """(token, raw log-prob, the k likeliest when asked for) per row, each row with its own settings, all rows
        at once."""
        logps = torch.log_softmax(logits, -1)
        scores = logits
        penalties = torch.tensor([r.params.repetition_penalty for r in rows])
        if bool((penalties != 1).any()):
            scores = _repetition_penalty(scores, rows, penalties)
        tokens = scores.argmax(-1)  # greedy rows (temperature 0) keep these
        temps = torch.tensor([r.params.temperature for r in rows])
        sampled = (temps > 0).nonzero().flatten()
        if len(sampled):
            chosen = [rows[i] for i in sampled.tolist()]
            top_k = torch.tensor([r.params.top_k for r in chosen])
            top_p = torch.tensor([r.params.top_p for r in chosen])
            tokens[sampled] = _sample_filtered(scores[sampled] / temps[sampled, None], top_k, top_p, self.generator)
        picked = logps.gather(1, tokens[:, None]).squeeze(1)
        tops: list[Ranked | None] = [None] * len(rows)
        most = max(r.params.logprobs or 0 for r in rows)
        if most:
            values, ids = logps.topk(min(most, logps.shape[-1]), dim=-1)
            values, ids = values.tolist(), ids.tolist()
            for i, r in enumerate(rows):
                k = r.params.logprobs or 0
                tops[i] = list(zip(ids[i][:k], values[i][:k], strict=True)) if k else None
        return list(zip(tokens.tolist(), picked.tolist(), tops, strict=True))

    def _record(self, rows: list[_Row], tokens: list[tuple[int, float, Ranked | None]]) -> tuple[list, list[int]]:
        finished, keep = [], []
        for i, (row, (token, logp, top)) in enumerate(zip(rows, tokens, strict=True)):
            row.out.append(token)
            row.logps.append(logp)
            if row.tops is not None:
                row.tops.append(top or [])
            done = self._finish_reason(row)
            if done is None:
                keep.append(i)
            else:
                finished.append(
                    (row.key, Completion(row.out, row.logps, *done, top_logprobs=row.tops,
                                         prompt_logprobs=row.prompt_logprobs))
                )  # fmt: skip
        return finished, keep

    def _finish_reason(self, row: _Row) -> tuple[str, int | str | None] | None:
        token = row.out[-1]
        if token in row.stop_ids:
            return "stop", token
        if row.params.stop:
            hit = self._stop_string(row)
            if hit is not None:
                return "stop", hit
        if len(row.out) >= row.params.max_tokens:
            return "length", None
        return None

    def _stop_string(self, row: _Row) -> str | None:
        # The text of the last few tokens: a stop string that ends in the newest token lies inside it (a string
        # found only earlier would have stopped the row then). A character may take several byte-level tokens.
        window = 4 * max(len(s) for s in row.params.stop) + 4
        text = self.tokenizer.decode(row.out[-window:], skip_special_tokens=False)
        return next((s for s in row.params.stop if s and s in text), None)


def _prompt_logprobs(logits: torch.Tensor, row: _Row) -> PromptLogprobs:
    """The row's prompt log-probs from its prefill logits [prompt length, vocab] (position j predicts token j+1)."""
    k = row.params.prompt_logprobs or 0
    logps = torch.log_softmax(logits[:-1].float(), -1)
    chosen = logps.gather(1, torch.tensor(row.prompt[1:], dtype=torch.long)[:, None]).squeeze(1).tolist()
    top: list[Ranked | None] = [[] for _ in chosen]
    if k and len(chosen):
        values, ids = logps.topk(min(k, logps.shape[-1]), dim=-1)
        top = [list(zip(i, v, strict=True)) for i, v in zip(ids.tolist(), values.tolist(), strict=True)]
    return PromptLogprobs([None, *chosen], [None, *top])


def _repetition_penalty(scores: torch.Tensor, rows: list[_Row], penalties: torch.Tensor) -> torch.Tensor:
    """vLLM's: the logits of tokens already in the prompt or the output are divided by the penalty when
    positive, multiplied when negative."""
    seen = torch.zeros_like(scores, dtype=torch.bool)
    for i, row in enumerate(rows):
        seen[i, torch.tensor(row.prompt + row.out)] = True
    pen = penalties[:, None].expand_as(scores)
    penalized = torch.where(scores > 0, scores / pen, scores * pen)
    return torch.where(seen, penalized, scores)


def _sample_filtered(
    scores: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, generator: torch.Generator | None
) -> torch.Tensor:
    """Sample one token per row from softmax(scores) after that row's top-k, then top-p (vLLM's order). One sort
    serves both filters: top-k keeps the tokens scoring at least the k-th best; top-p keeps the smallest prefix of
    the rest (by score) whose probability reaches p."""
    vocab = scores.shape[-1]
    if not bool(((top_k > 0) & (top_k < vocab)).any() or (top_p < 1).any()):
        return torch.multinomial(scores.softmax(-1), 1, generator=generator).squeeze(1)
    ordered, order = torch.sort(scores, dim=-1, descending=True)
    k = torch.where((top_k <= 0) | (top_k >= vocab), vocab, top_k)
    kth = ordered.gather(1, (k - 1)[:, None])
    ordered = ordered.masked_fill(ordered < kth, float("-inf"))
    probs = ordered.softmax(-1)
    filter_p = top_p < 1
    if bool(filter_p.any()):
        before = probs.cumsum(-1) - probs  # probability of the better tokens
        drop = (before >= top_p[:, None]) & filter_p[:, None]
        ordered = ordered.masked_fill(drop, float("-inf"))
        probs = ordered.softmax(-1)
    picked = torch.multinomial(probs, 1, generator=generator).squeeze(1)
    return order.gather(1, picked[:, None]).squeeze(1)


def load_policy(path, attn_implementation: str = "sdpa"):
    """(model, tokenizer, stop ids) of a causal LM folder, as the `hf` rollout serves it: fp32 (bf16 matmuls are slow
    on CPUs without bf16 instructions), eval mode, stopping at the generation config's and the tokenizer's EOS."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation=attn_implementation)
    model.eval()
    return (model, *load_tokenizer(path))


def load_tokenizer(path):
    """(tokenizer, stop ids) of a causal LM folder: the generation config's and the tokenizer's EOS."""
    from transformers import AutoTokenizer, GenerationConfig

    tok = AutoTokenizer.from_pretrained(path)
    eos = set()
    try:
        gen = GenerationConfig.from_pretrained(path)
        eos |= set(gen.eos_token_id if isinstance(gen.eos_token_id, list) else [gen.eos_token_id])
    except OSError:
        pass
    if tok.eos_token_id is not None:
        eos.add(tok.eos_token_id)
    return tok, {e for e in eos if e is not None}


def generate(
    model,
    prompts: Sequence[Sequence[int]],
    params: SamplingParams | Sequence[SamplingParams],
    eos_ids: Iterable[int],
    *,
    generator: torch.Generator | None = None,
    tokenizer=None,
    max_batch_size: int = 256,
    max_prefill_tokens: int = 8192,
    pad_id: int = 0,
    on_step: Callable[[BatchSampler], None] | None = None,
) -> list[Completion]:
    """Sample a completion for every prompt (token ids), batched; returns them in the prompts' order.
    `params` is one SamplingParams for all prompts or one per prompt."""
    if isinstance(params, SamplingParams):
        params = [params] * len(prompts)
    if len(params) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(params)} sampling params")
    sampler = BatchSampler(
        model,
        eos_ids,
        generator=generator,
        tokenizer=tokenizer,
        max_batch_size=max_batch_size,
        max_prefill_tokens=max_prefill_tokens,
        pad_id=pad_id,
    )
    for i, (prompt, p) in enumerate(zip(prompts, params, strict=True)):
        sampler.add(prompt, p, key=i)
    results: dict[int, Completion] = {}
    while sampler.busy:
        results.update(sampler.step())
        if on_step is not None:
            on_step(sampler)
    return [results[i] for i in range(len(prompts))]
