"""env=reasoning_gym's scorer (reward=env): reasoning-gym's own, for each row's task.

Every row the environment writes (trainctl.envs.reasoning_gym) carries its task and reasoning-gym's entry in
`extra_info`; the response's answer is the text of its last <answer>...</answer> (the tag is env.answer_tag, written
into the row), or with env.answer_pattern the first group of that expression's last match, and the task's
`score_answer` grades it against the entry, as reasoning-gym's own evaluations do. A response without the tag scores
what the task gives no answer (0 for every task trainctl has tried).

`acc` is 1 for a full score only, so validation's acc (val-core/reasoning_gym/TASK/acc/mean@1) is each task's
accuracy while `score` keeps the partial credit some tasks give.
"""

from __future__ import annotations

import json
import re
from functools import cache


@cache
def _scorer(task: str):
    # a default-configured dataset of the task: its score_answer reads everything it needs from the entry
    from reasoning_gym import get_score_answer_fn

    return get_score_answer_fn(task)


def score(solution_str: str, extra_info: dict) -> float:
    """reasoning-gym's score of a response to the row `extra_info` describes."""
    from reasoning_gym.utils import extract_answer

    entry = json.loads(extra_info["entry"])
    pattern = extra_info.get("answer_pattern")
    if pattern:
        found = re.findall(pattern, solution_str)
        last = found[-1] if found else None
        answer = (last[0] if isinstance(last, tuple) else last).strip() if last is not None else None
    else:
        answer = extract_answer(solution_str, tag_name=extra_info.get("answer_tag") or "answer")
    return float(_scorer(extra_info["task"])(answer, entry))


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    value = score(solution_str, extra_info or {})
    return {"score": value, "acc": float(value >= 1.0)}
