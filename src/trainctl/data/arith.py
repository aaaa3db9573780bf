"""The `arith` dataset: synthetic arithmetic with gsm8k-style `#### <answer>` ground truths, generated locally.

Seeded and deterministic: the same rows on every machine, so tests and the demo need no download.
"""

from __future__ import annotations

import random
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


def problems(n: int, seed: int, split: str) -> Iterator[Problem]:
    """n problems; the split salts the seed so train and test differ."""
    rng = random.Random(f"{seed}-{split}")
    for i in range(n):
        op = OPS[rng.randrange(len(OPS))]
        hi = 12 if op == "*" else 99
        yield Problem(index=i, a=rng.randint(0, hi), op=op, b=rng.randint(0, hi))


def wrong_answer(p: Problem, rng: random.Random) -> int:
    return p.answer + rng.choice([-10, -2, -1, 1, 2, 10])


def corpus_lines(n: int = 400) -> list[str]:
    """Text the tiny tokenizer is trained on: arith questions and solutions in chat form."""
    lines = []
    for p in problems(n, seed=0, split="tokenizer"):
        lines.append(p.prompt)
        lines.append(p.solution())
    return lines


def rows(fmt: str, split: str, n: int, seed: int) -> Iterator[dict]:
    """Rows in one of the trainer formats (see trainctl.data.formats)."""
    from trainctl.data.formats import dpo_row, rl_row, sft_row

    rng = random.Random(f"{seed}-{split}-wrong")
    for p in problems(n, seed, split):
        if fmt == "rl":
            extra = {"split": split, "index": p.index, "question": p.question, "answer": p.solution()}
            yield rl_row("openai/gsm8k", p.prompt, str(p.answer), ability="math", extra_info=extra)
        elif fmt == "sft":
            yield sft_row(p.prompt, p.solution())
        elif fmt == "dpo":
            yield dpo_row(p.prompt, p.solution(), p.rejected(rng))
        else:
            raise ValueError(fmt)
