"""Verifying a GGUF export with llama.cpp itself (trainctl.ckpt.llamacpp): the file loads; llama.cpp's tokenizer gives
transformers' ids on probe texts; its chat template renders conversations as transformers renders them (what
llama-server's chat endpoint sends the model); and its greedy tokens are trainctl's own greedy answer (the sampler
`chat`, `model serve` and `eval` use, on the source folder's float32 weights) on a few chat prompts.

Greedy tokens must be equal at f32 and f16. At bf16 and q8_0 the weights are rounded further, and the agreement is
measured and shown (tokens agreeing before the first divergence, of all tokens), not required. A divergence at a
position where trainctl's own model scores both tokens within rounding of each other (a near tie: TIES below, in
nats) is not a disagreement about the model, and is reported as such rather than failed.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

# questions asked in the model's chat template; the answers are compared token by token
QUESTIONS = (
    "What is 2 + 3?",
    "What is 26 + 38? Answer with the number after ####.",
    "Write one sentence about the sea.",
)
MAX_TOKENS = 24
# texts for the tokenizers: digits, spaces and newlines, accents, scripts, emoji, code, markup
TEXTS = (
    "Ünïcödé: naïve café, 漢字, Привет, مرحبا, 😀👍 ½ — \"quotes\" and 'apostrophes' I've you'll",
    "def f(x):\n    return x**2  # 100% of 1234567\r\n\t\ttabs   and    spaces\n\n\n",
)
# dtypes whose greedy tokens must equal trainctl's, and the log-prob gap (nats) under which two tokens tie
REQUIRED = ("f32", "f16")
TIES = {"f32": 1e-3, "f16": 2e-2}


@dataclass
class Verdict:
    file: str
    dtype: str
    verifier: str
    passed: bool
    tokenizer: dict = field(default_factory=dict)  # texts, equal, first difference
    template: dict = field(default_factory=dict)  # conversations, equal (or none: the model has no template)
    greedy: dict = field(default_factory=dict)  # prompts, equal, near ties, tokens, agreement, largest log-prob gap
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict:
        return asdict(self)

    def lines(self) -> list[str]:
        """The verdict, a line per check."""
        t, c, g = self.tokenizer, self.template, self.greedy
        out = [f"tokenizer: {t['equal']}/{t['texts']} probe texts give transformers' ids"]
        if c.get("conversations"):
            out.append(f"chat template: {c['equal']}/{c['conversations']} conversations render as transformers does")
        else:
            out.append("chat template: none in the model (llama.cpp will fall back to its own default)")
        ties = f", {g['near_ties']} at a near tie" if g.get("near_ties") else ""
        out.append(
            f"greedy: {g['equal']}/{g['prompts']} answers equal to trainctl's{ties}; {g['agreeing']}/{g['tokens']} "
            f"tokens agree ({100 * g['agreement']:.1f}%); log-probs within {g['max_logprob_gap']:.2g} nats"
        )
        return out


def _threads() -> int:
    """llama.cpp's threads: OMP_NUM_THREADS where it is set (torch honours it too), else the cores, up to 8."""
    try:
        return max(1, int(os.environ["OMP_NUM_THREADS"]))
    except (KeyError, ValueError):
        return max(1, min(8, os.cpu_count() or 1))


def _conversations() -> list[list[dict]]:
    return [
        [{"role": "user", "content": QUESTIONS[0]}],
        [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": QUESTIONS[1]}],
        [
            {"role": "user", "content": QUESTIONS[0]},
            {"role": "assistant", "content": "5"},
            {"role": "user", "content": QUESTIONS[2]},
        ],
    ]


def _render(tokenizer, messages: list[dict], tokenize: bool):
    out = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=tokenize)
    return out["input_ids"] if tokenize and not isinstance(out, list) else out


def _prompts(tokenizer) -> list[list[int]]:
    if tokenizer.chat_template:
        return [list(_render(tokenizer, [{"role": "user", "content": q}], True)) for q in QUESTIONS]
    return [tokenizer(q).input_ids for q in QUESTIONS]


def _check_tokenizer(cpp, tokenizer, prompts: list[list[int]]) -> dict:
    texts = [*TEXTS, *(tokenizer.decode(p) for p in prompts)]
    from trainctl.models.importer import PROBE

    texts.insert(0, PROBE)
    equal, first = 0, None
    for text in texts:
        ours = tokenizer(text, add_special_tokens=False).input_ids
        theirs = cpp.tokenize(text)
        if ours == theirs:
            equal += 1
        elif first is None:
            at = next(
                (i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), min(len(ours), len(theirs))
            )
            first = {"text": text[:80], "at": at, "transformers": ours[at : at + 4], "llama.cpp": theirs[at : at + 4]}
    return {"texts": len(texts), "equal": equal, "first_difference": first}


def _check_template(cpp, tokenizer) -> dict:
    if not tokenizer.chat_template:
        return {"conversations": 0, "equal": 0}
    n = equal = 0
    first = None
    for messages in _conversations():
        try:
            ours = _render(tokenizer, messages, False)
        except Exception:  # a template that refuses this shape of conversation (e.g. no system role)
            continue
        n += 1
        theirs = cpp.render(messages)
        if ours == theirs:
            equal += 1
        elif first is None:
            first = {"transformers": ours[-200:], "llama.cpp": theirs[-200:]}
    return {"conversations": n, "equal": equal, "first_difference": first}


def _compare(dtype: str, ours, theirs) -> dict:
    """trainctl's completions against llama.cpp's answers, prompt by prompt."""
    equal = ties = agreeing = total = 0
    gap = 0.0
    diverged = []
    for i, (c, answer) in enumerate(zip(ours, theirs, strict=True)):
        mine, tokens, logps = list(c.token_ids), answer.tokens, answer.logprobs
        same = next(
            (k for k, (a, b) in enumerate(zip(mine, tokens, strict=False)) if a != b), min(len(mine), len(tokens))
        )
        agreeing += same
        total += len(mine)
        for k in range(min(same, len(logps), len(c.log_probs))):
            if logps[k] is not None:
                gap = max(gap, abs(c.log_probs[k] - logps[k]))
        # llama.cpp stops at every end-of-generation token of its vocabulary (<|endoftext|> as well as the EOS):
        # its answer, cut there, is trainctl's up to that token
        prefix_stop = same == len(tokens) < len(mine) and answer.stop == "eos"
        if same == len(mine) == len(tokens) or prefix_stop:
            equal += 1
            continue
        if same < min(len(mine), len(tokens)) and c.top_logprobs and dtype in TIES:
            top = dict(c.top_logprobs[same])
            other = top.get(tokens[same])
            if other is not None and c.log_probs[same] - other <= TIES[dtype]:
                ties += 1
                diverged.append({"prompt": i, "at": same, "near_tie": round(c.log_probs[same] - other, 6)})
                continue
        diverged.append(
            {"prompt": i, "at": same, "trainctl": mine[same : same + 4], "llama.cpp": tokens[same : same + 4]}
        )
    return {
        "prompts": len(ours),
        "equal": equal,
        "near_ties": ties,
        "tokens": total,
        "agreeing": agreeing,
        "agreement": agreeing / total if total else 1.0,
        "max_logprob_gap": gap,
        "diverged": diverged,
    }


def verify(path: Path, folder: Path, dtype: str, reference=None) -> Verdict:
    """Check the GGUF file at `path` against the Hugging Face folder it was written from. `reference` is trainctl's
    loaded model for that folder (model, tokenizer, stop ids), when the caller holds one."""
    from transformers.utils import logging as hf_logging

    from trainctl.ckpt.llamacpp import LlamaCpp, version
    from trainctl.runtime.sampler import SamplingParams, generate, load_policy

    hf_logging.disable_progress_bar()  # "Loading weights" for every tensor
    start = time.monotonic()
    model, tokenizer, eos_ids = reference or load_policy(str(folder))
    prompts = _prompts(tokenizer)
    ours = generate(
        model, prompts, SamplingParams(max_tokens=MAX_TOKENS, temperature=0, logprobs=5), eos_ids,
        pad_id=tokenizer.pad_token_id or 0,
    )  # fmt: skip
    verdict = Verdict(str(path), dtype, version(), passed=False)
    with LlamaCpp(path, n_ctx=1024, threads=_threads()) as cpp:
        verdict.tokenizer = _check_tokenizer(cpp, tokenizer, prompts)
        verdict.template = _check_template(cpp, tokenizer)
        theirs = [cpp.greedy(p, MAX_TOKENS) for p in prompts]
    verdict.greedy = _compare(dtype, ours, theirs)
    t, c, g = verdict.tokenizer, verdict.template, verdict.greedy
    if t["equal"] < t["texts"]:
        differ = t["texts"] - t["equal"]
        verdict.problems.append(
            f"llama.cpp's tokenizer differs from transformers' on {differ} text(s): {t['first_difference']}"
        )
    if c["equal"] < c["conversations"]:
        verdict.problems.append(f"llama.cpp renders the chat template differently: {c['first_difference']}")
    if dtype in REQUIRED and g["equal"] + g["near_ties"] < g["prompts"]:
        verdict.problems.append(f"llama.cpp's greedy answers differ from trainctl's at {dtype}: {g['diverged']}")
    verdict.passed = not verdict.problems
    verdict.seconds = round(time.monotonic() - start, 2)
    return verdict
