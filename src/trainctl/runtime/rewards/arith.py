"""arith's shaped reward (`reward=arith`): full marks for the right answer in gsm8k's form, and short of it, credit for
writing like an answer, so that even a model that has never seen arithmetic gets a reward that varies from sample to
sample (verl's gsm8k scorer gives it 0 every time, and GRPO then learns nothing).

  1.0   the response's `#### N` is the right answer
  0.5   plus half the share of its characters that an arithmetic answer is made of (digits, operators, `=`, `#`,
        spaces, newlines), when it has a `#### N` line with a wrong number
  0-0.5 that half share alone, when it has no `#### N` line

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
    return {"score": (0.5 if found else 0.0) + 0.5 * shape, "acc": 0.0}
