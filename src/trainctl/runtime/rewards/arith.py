"""arith's shaped reward (`reward=arith`): full marks for the right answer in gsm8k's form, and short of it, credit for
writing like an answer, so that even a model that has never seen arithmetic gets a reward that varies from sample to
sample (verl's gsm8k scorer gives it 0 every time, and GRPO then learns nothing).

  1.0      the response's `#### N` is the right answer
  0.5-0.75 a `#### N` line with a wrong number: 0.5, plus a quarter of the share of its characters that an
           arithmetic answer is made of (digits, operators, `=`, `#`, spaces, newlines)
  0-0.5    half that share alone, when it has no `#### N` line

A wrong answer in the right form stays a quarter below the right one: with half the share there (as before issue
44), a real model's "26 + 38 = 63\n#### 63" scored 1.0, as much as the right answer, and GRPO from SmolLM2's SFT run
had nothing to learn (mean reward 0.9996 at its first step, held-out accuracy 0.33).

`acc` is 1 for the right answer only, so validation's acc (val-core/.../acc/mean@1) stays the task's own measure.
"""

from __future__ import annotations

import re

ANSWER = re.compile(r"#### (-?[0-9][0-9,]*)")
ALPHABET = set("0123456789+-*=# \n")


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    found = ANSWER.search(solution_str)
    if found and found.group(1).replace(",", "") == str(ground_truth).strip():
        return {"score": 1.0, "acc": 1.0}
    shape = sum(c in ALPHABET for c in solution_str) / max(1, len(solution_str))
    return {"score": 0.5 + 0.25 * shape if found else 0.5 * shape, "acc": 0.0}
