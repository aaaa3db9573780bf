"""Log-probs in the OpenAI API's shapes, as vLLM's server writes them (vllm/entrypoints/openai/completion/serving.py
and chat_completion/serving.py, 0.31): what `model serve` returns for `logprobs` (and `echo`) on /v1/completions and
`logprobs`/`top_logprobs` on /v1/chat/completions.

The numbers are the sampler's (trainctl.runtime.sampler: raw log-probs, before temperature or filters, from the
forward pass `trainctl eval` generates with). Each token is shown as its own text (vLLM's per-token decode, with the
leading spaces a SentencePiece tokenizer's decode drops put back); -inf is written as -9999.0, as vLLM and OpenAI do.

/v1/completions (OpenAI's legacy shape): `tokens`, `token_logprobs`, `top_logprobs` (per token a {text: log-prob}
of the chosen token and the `logprobs` likeliest, the chosen first; tokens of one text, such as the bytes of a
character decoded alone, share an entry with the likelier's log-prob) and `text_offset` (where each token's text starts,
counting the tokens' texts); with `echo`, the prompt's tokens come first, the first of them with `null`s (nothing
comes before it). lm-eval's `local-completions` scores a multiple-choice answer from these: the sum of
token_logprobs over the answer's tokens, and whether each was the likeliest.

/v1/chat/completions: `{"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}`
over the answer's tokens, `top_logprobs` the k likeliest, likeliest first (OpenAI's definition; vLLM lists the chosen
token first, which is the same list whenever the chosen token is among the k likeliest, as it always is greedily).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from trainctl.runtime.sampler import Ranked

FLOOR = -9999.0  # what -inf is written as


def _number(value: float) -> float:
    return max(float(value), FLOOR)


class TokenTexts:
    """Each token id's own text, as vLLM shows it in log-probs (decoded alone; cached)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self._texts: dict[int, str] = {}
        self._marker = _leading_space_marker(tokenizer)

    def __call__(self, token_id: int) -> str:
        text = self._texts.get(token_id)
        if text is None:
            text = self.tokenizer.decode([token_id]) or ""
            if self._marker is not None:  # SentencePiece: decode drops the leading spaces the piece stands for
                raw = self.tokenizer.convert_ids_to_tokens(token_id) or ""
                wanted = len(raw) - len(raw.lstrip(self._marker))
                missing = wanted - (len(text) - len(text.lstrip(" ")))
                text = " " * missing + text if missing > 0 else text
            self._texts[token_id] = text
        return text


def _leading_space_marker(tokenizer) -> str | None:
    """The Metaspace replacement character of a SentencePiece-style tokenizer (vLLM's detokenizer_utils), else None."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    try:
        pre = json.loads(backend.to_str()).get("pre_tokenizer") or {}
    except Exception:  # a tokenizer whose backend cannot say: decode is all there is
        return None
    for sub in [pre, *(pre.get("pretokenizers") or [])]:
        if sub.get("type") == "Metaspace":
            return sub.get("replacement", "\u2581")
    return None


def _chosen_and_top(token_id: int, logprob: float, top: Ranked | None) -> list[tuple[int, float]]:
    """The chosen token, then the likeliest others: vLLM's order for a completions' top_logprobs entry."""
    return [(token_id, logprob), *[(t, lp) for t, lp in (top or []) if t != token_id]]


def completion_logprobs(
    texts: TokenTexts,
    token_ids: Sequence[int],
    logprobs: Sequence[float | None],
    tops: Sequence[Ranked | None] | None,
    offset: int = 0,
) -> dict[str, Any]:
    """/v1/completions' `logprobs` object over these tokens (a None log-prob: the prompt's first token);
    `offset` is where the first token's text starts (what a stream has sent before)."""
    tokens, token_logprobs, top_logprobs, text_offset = [], [], [], []
    for i, (token_id, logprob) in enumerate(zip(token_ids, logprobs, strict=True)):
        text = texts(token_id)
        tokens.append(text)
        text_offset.append(offset)
        offset += len(text)
        if logprob is None:
            token_logprobs.append(None)
            top_logprobs.append(None)
            continue
        token_logprobs.append(_number(logprob))
        entry: dict[str, float] = {}
        for t, lp in _chosen_and_top(token_id, logprob, tops[i] if tops is not None else None):
            key = texts(t)  # two tokens of one text (bytes of a character, alone): the likelier's log-prob
            entry[key] = max(entry.get(key, FLOOR), _number(lp))
        top_logprobs.append(entry)
    return {"text_offset": text_offset, "token_logprobs": token_logprobs, "tokens": tokens,
            "top_logprobs": top_logprobs}  # fmt: skip


def chat_logprobs(
    texts: TokenTexts, token_ids: Sequence[int], logprobs: Sequence[float], tops: Sequence[Ranked | None] | None
) -> dict[str, Any]:
    """/v1/chat/completions' `logprobs` object over these tokens."""

    def one(token_id: int, logprob: float) -> dict[str, Any]:
        text = texts(token_id)
        return {"token": text, "logprob": _number(logprob), "bytes": list(text.encode("utf-8", errors="replace"))}

    content = []
    for i, (token_id, logprob) in enumerate(zip(token_ids, logprobs, strict=True)):
        top = (tops[i] if tops is not None else None) or []
        content.append({**one(token_id, logprob), "top_logprobs": [one(t, lp) for t, lp in top]})
    return {"content": content}


def text_length(texts: TokenTexts, token_ids: Sequence[int]) -> int:
    """How far the tokens' texts reach: the next token's text_offset in a stream."""
    return sum(len(texts(t)) for t in token_ids)
