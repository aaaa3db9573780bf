"""The `arith` dataset: synthetic arithmetic with gsm8k-style `#### <answer>` ground truths, generated locally.

Seeded and deterministic: the same rows on every machine, so tests and the demo need no download.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

# verl's gsm8k example asks for this, and its gsm8k scorer reads the number after ####
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
OPS = ("+", "-", "*")


@dataclass(frozen=True)
class Problem:
    index: int
    a: int
    op: str
    b: int

    @property
    def answer(self) -> int:
        return self.a + self.b if self.op == "+" else self.a - self.b if self.op == "-" else self.a * self.b

    @property
    def question(self) -> str:
        return f"What is {self.a} {self.op} {self.b}?"

    @property
    def prompt(self) -> str:
        return f"{self.question} {INSTRUCTION}"

    def solution(self, answer: int | None = None) -> str:
        value = self.answer if answer is None else answer
        return f"{self.a} {self.op} {self.b} = {value}\n#### {value}"

    def rejected(self, rng: random.Random) -> str:
        """A dispreferred answer: wrong, and without the `#### <answer>` line the gsm8k scorer reads."""
        return f"{self.a} {self.op} {self.b} = {wrong_answer(self, rng)}"


# the splits are cut, in this order, from one stream of distinct problems: no repeats, no test row seen in training;
# `warmup` is what tiny-tools' warm start learns the calculator on (trainctl.models.tool_warm_start), so that RL on
# the train split meets questions the warm start never saw
SPLITS = ("train", "test", "warmup")
# problems reserved per split; the space holds 20,169 distinct ones (a + b and a - b up to 99, a * b up to 12)
SPLIT_ROOM = 8_000
SPACE = 2 * 100 * 100 + 13 * 13


def room(split: str) -> int:
    """How many distinct problems a split can hold: the last of SPLITS has what the others leave."""
    if split in SPLITS and SPLITS.index(split) == len(SPLITS) - 1:
        return SPACE - (len(SPLITS) - 1) * SPLIT_ROOM
    return SPLIT_ROOM


def _distinct(seed: int) -> Iterator[tuple[int, str, int]]:
    rng = random.Random(seed)
    seen: set[tuple[int, str, int]] = set()
    while True:
        op = OPS[rng.randrange(len(OPS))]
        hi = 12 if op == "*" else 99
        p = (rng.randint(0, hi), op, rng.randint(0, hi))
        if p not in seen:
            seen.add(p)
            yield p


def problems(n: int, seed: int, split: str) -> Iterator[Problem]:
    """n distinct problems of a split; train and test never share one (other splits draw their own)."""
    if n > room(split):
        raise ValueError(f"arith has room for {room(split)} problems in split {split!r}, not {n}")
    if split in SPLITS:
        stream = _distinct(seed)
        for _ in range(SPLITS.index(split) * SPLIT_ROOM):
            next(stream)
    else:
        stream = _distinct(zlib.crc32(f"{seed}-{split}".encode()))
    for i in range(n):
        a, op, b = next(stream)
        yield Problem(index=i, a=a, op=op, b=b)


def wrong_answer(p: Problem, rng: random.Random) -> int:
    return p.answer + rng.choice([-10, -2, -1, 1, 2, 10])


def corpus_lines(n: int = 400) -> list[str]:
    """Text the tiny tokenizer is trained on: arith questions and solutions in chat form."""
    lines = []
    for p in problems(n, seed=0, split="tokenizer"):
        lines.append(p.prompt)
        lines.append(p.solution())
    return lines


def examples(split: str, n: int, seed: int) -> Iterator[tuple]:
    """(example, location, extra_info) for every problem: the answer for SFT and RL, a rejected one for DPO and KTO."""
    from trainctl.data.shapes import Example

    rng = random.Random(f"{seed}-{split}-wrong")
    for p in problems(n, seed, split):
        ex = Example(
            prompt=[{"role": "user", "content": p.prompt}],
            response=p.solution(),
            chosen=[{"role": "assistant", "content": p.solution()}],
            rejected=[{"role": "assistant", "content": p.rejected(rng)}],
        )
        yield ex, f"arith[{split}]:{p.index + 1}", {"question": p.question, "answer": p.solution()}


def rows(fmt: str, split: str, n: int, seed: int) -> Iterator[dict]:
    """Rows of one trainer format (see trainctl.data.convert)."""
    from trainctl.data.convert import Target

    target = Target(fmt=fmt, data_source="openai/gsm8k", ability="math", split=split)
    for i, (ex, _, extra) in enumerate(examples(split, n, seed)):
        yield from target.rows(ex, i, extra)
    yield from target.rest()
