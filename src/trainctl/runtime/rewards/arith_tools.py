"""arith-tools' reward for the agent recipe (`reward=arith-tools`): credit for using the calculator well, then for the
right answer, so that what rises is the task, not the look of the text.

  1.0   the response's `#### N` is the right answer
  0.5   a calculator call answered the right number (a <tool_response> holding the ground truth), the final answer
        wrong or missing
  0.1   a well-formed calculator call that answered something else
  0     no call answered, no right answer

`reward=arith` credits digit-like text short of the right answer; on the agent recipe the model learned to write
longer, digit-filled answers and to call the calculator less (0.83 -> 0.34 of the trajectories in 20 steps). Here no
credit comes from the text's shape. `acc` is 1 for the right answer only.
"""

from __future__ import annotations

import re

ANSWER = re.compile(r"#### (-?[0-9][0-9,]*)")
RESULT = re.compile(r"<tool_response>\s*(.*?)\s*</tool_response>", re.S)


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    truth = str(ground_truth).strip()
    answers = ANSWER.findall(solution_str)
    # the answer is the model's last `#### N` (a tool result never holds one)
    if answers and answers[-1].replace(",", "") == truth:
        return {"score": 1.0, "acc": 1.0}
    results = [r.strip() for r in RESULT.findall(solution_str)]
    if truth in results:
        return {"score": 0.5, "acc": 0.0}
    answered = [r for r in results if r and not r.startswith("Error")]
    return {"score": 0.1 if answered else 0.0, "acc": 0.0}
