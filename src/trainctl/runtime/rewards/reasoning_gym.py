"""env=reasoning_gym's scorer (reward=env): reasoning-gym's own, for each row's task.

Every row the environment writes (trainctl.envs.reasoning_gym) carries its task and reasoning-gym's entry in
`extra_info`; the response's answer is the text of its last <answer>...</answer> (the tag is env.answer_tag, written
into the row), or with env.answer_pattern the first group of that expression's last match, and the task's
`score_answer` grades it against the entry, as reasoning-gym's own evaluations do. A response without the tag scores
what the task gives no answer (0 for every task trainctl has tried).

With env.format_score, an answer the scorer could read (the tag, or the pattern matched) scores at least that much:
the format credit verl's own gsm8k scorer has (`format_score`), which gives a model that never answers in the asked
form something to learn from first. `acc` is 1 for a full score only, so validation's acc
(val-core/reasoning_gym/TASK/acc/mean@1) is each task's accuracy while `score` keeps the partial credit some tasks
give, and the format's.
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


def score(solution_str: str, extra_info: dict) -> tuple[float, float]:
    """(the reward, reasoning-gym's own score) of a response to the row `extra_info` describes: the reward is the
    score, or the row's format_score when that is more and the answer could be read."""
    from reasoning_gym.utils import extract_answer

    entry = json.loads(extra_info["entry"])
    pattern = extra_info.get("answer_pattern")
    if pattern:
        found = re.findall(pattern, solution_str)
        last = found[-1] if found else None
        answer = (last[0] if isinstance(last, tuple) else last).strip() if last is not None else None
    else:
        answer = extract_answer(solution_str, tag_name=extra_info.get("answer_tag") or "answer")
    own = float(_scorer(extra_info["task"])(answer, entry))
    return (max(own, float(extra_info.get("format_score") or 0.0)) if answer is not None else own), own


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    value, own = score(solution_str, extra_info or {})
    return {"score": value, "acc": float(own >= 1.0)}
