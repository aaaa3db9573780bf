"""How `trainctl eval` samples and counts: `n=8 temperature=0.7 ...` words on its command line, each defaulting to
what the training config's own validation uses (verl's `actor_rollout_ref.rollout.val_kwargs`: greedy, one sample)."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainctl.errors import Problem, UsageError
from trainctl.eval.passk import default_ks

# the words eval takes out of its overrides before the rest are composed into a config
KEYS = {
    "n": "samples per prompt (default: val_kwargs.n, 1)",
    "k": "pass@k for these k (default: 1, 2, 4, ... n); e.g. k=1,8",
    "temperature": "sampling temperature, 0 = greedy (default: val_kwargs.temperature, 0)",
    "top_p": "nucleus sampling (default: val_kwargs.top_p, 1.0)",
    "top_k": "top-k sampling, -1 = off (default: val_kwargs.top_k, -1)",
    "max_tokens": "tokens per response (default: data.max_response_length, as training's rollout)",
    "seed": "sampling seed (default: run.seed)",
    "threshold": "a sample counts as correct for pass@k when its acc (else its reward) is >= this (default 1.0)",
}


@dataclass
class Sampling:
    n: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 0
    seed: int = 0
    ks: list[int] = field(default_factory=lambda: [1])
    threshold: float = 1.0
    given: dict[str, str] = field(default_factory=dict)  # what the command line set, as written

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def describe(self) -> str:
        how = "greedy" if self.greedy else f"temperature {self.temperature:g}, top_p {self.top_p:g}, top_k {self.top_k}"
        return f"n={self.n}, {how}, max {self.max_tokens} tokens, seed {self.seed}"


def split_words(words: list[str]) -> tuple[dict[str, str], list[str]]:
    """(eval settings as written, the config overrides)."""
    settings, rest = {}, []
    for w in words:
        key, eq, value = w.partition("=")
        if eq and key in KEYS:
            if key in settings:
                raise UsageError(f"{key} is given twice ({key}={settings[key]} and {w}).", hint=f"keep one {key}=...")
            settings[key] = value
        else:
            rest.append(w)
    return settings, rest


def _number(key: str, text: str, kind):
    try:
        return kind(text)
    except ValueError:
        raise UsageError(
            f"{key}={text}: not {'an integer' if kind is int else 'a number'}.", hint=f"{key}: {KEYS[key]}"
        ) from None


def sampling(given: dict[str, str], defaults: dict) -> tuple[Sampling, list[Problem]]:
    """The settings: the command line's words over `defaults` (temperature, top_p, top_k, n, max_tokens, seed).
    Returns them with the problems found (n < k, out-of-range values)."""
    s = Sampling(given=dict(given))
    s.n = _number("n", given["n"], int) if "n" in given else int(defaults.get("n") or 1)
    s.temperature = (
        _number("temperature", given["temperature"], float)
        if "temperature" in given
        else float(defaults.get("temperature") or 0.0)
    )
    s.top_p = _number("top_p", given["top_p"], float) if "top_p" in given else float(defaults.get("top_p", 1.0))
    s.top_k = _number("top_k", given["top_k"], int) if "top_k" in given else int(defaults.get("top_k", -1))
    s.max_tokens = (
        _number("max_tokens", given["max_tokens"], int) if "max_tokens" in given else int(defaults["max_tokens"])
    )
    s.seed = _number("seed", given["seed"], int) if "seed" in given else int(defaults.get("seed") or 0)
    s.threshold = _number("threshold", given["threshold"], float) if "threshold" in given else 1.0
    if "k" in given:
        s.ks = sorted({_number("k", part.strip(), int) for part in given["k"].strip("[]").split(",") if part.strip()})
    else:
        s.ks = default_ks(max(1, s.n))
    problems = []
    if s.n < 1:
        problems.append(Problem(f"n={s.n}: at least one sample per prompt.", key="n", hint="n=1"))
    too_big = [k for k in s.ks if k > s.n]
    fitting = ",".join(str(k) for k in s.ks if k <= s.n)
    if s.n >= 1 and too_big:
        problems.append(
            Problem(
                f"pass@{too_big[-1]} needs at least {too_big[-1]} samples per prompt, but n={s.n}.",
                key="k",
                hint=f"n={too_big[-1]}" + (" temperature=0.7" if s.greedy else "") + f", or k={fitting or '1'}",
            )
        )
    if any(k < 1 for k in s.ks):
        problems.append(Problem(f"k={given.get('k')}: every k must be >= 1.", key="k", hint="k=1"))
    if s.temperature < 0:
        problems.append(Problem(f"temperature={s.temperature:g} is negative.", key="temperature", hint="temperature=0"))
    if not 0 < s.top_p <= 1:
        problems.append(Problem(f"top_p={s.top_p:g} is not in (0, 1].", key="top_p", hint="top_p=1.0"))
    if s.max_tokens < 1:
        problems.append(Problem(f"max_tokens={s.max_tokens}: at least 1.", key="max_tokens", hint="max_tokens=256"))
    if s.n > 1 and s.greedy:
        problems.append(
            Problem(
                f"n={s.n} with greedy decoding (temperature 0): every sample of a prompt is the same, so pass@k "
                "equals pass@1.",
                key="temperature",
                hint=f"n={s.n} temperature=0.7",
                severity="warning",
            )
        )
    return s, problems
