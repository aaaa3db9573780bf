"""The reward functions trainctl ships (reward=arith, reward=arith-tools), on responses its runs really produced."""

from __future__ import annotations

import pytest

from trainctl.runtime.rewards import arith, arith_tools

# an agent trajectory as verl decodes it for the reward: the call, the tool's answer as the next turn, the final answer
CALLED = (
    '<tool_call>\n{{"name": "calculator", "arguments": {{"expression": "{expr}"}}}}\n</tool_call>\nuser\n'
    "<tool_response>\n{result}\n</tool_response>\nassistant\n{final}"
)


@pytest.mark.parametrize(
    ("response", "truth", "score", "acc"),
    [
        (CALLED.format(expr="9 * 12", result="108", final="#### 108"), "108", 1.0, 1.0),
        (CALLED.format(expr="9 * 12", result="108", final="9 * 12 = 108\n#### 107"), "108", 0.5, 0.0),
        (CALLED.format(expr="4 - 26", result="-22", final="14 + 8 = -6\n#### -7"), "108", 0.1, 0.0),
        (CALLED.format(expr="8 -", result="Error: not an arithmetic expression", final="#### 3"), "5", 0.0, 0.0),
        ("#### 64", "64", 1.0, 1.0),  # no call, the right answer: the task is the answer
        ("6 4 + = 8 ## 1 2 3 4 5 6 7 8 9", "64", 0.0, 0.0),  # digit-like text earns nothing here
    ],
)
def test_arith_tools_credits_the_call_and_the_answer_never_the_look(response, truth, score, acc):
    assert arith_tools.compute_score("openai/gsm8k", response, truth) == {"score": score, "acc": acc}


def test_arith_credits_the_look_of_an_answer_which_arith_tools_does_not():
    digits = "6 4 + = 8 ## 1 2 3 4 5 6 7 8 9"
    assert arith.compute_score("openai/gsm8k", digits, "64")["score"] > 0.4
    assert arith.compute_score("openai/gsm8k", "#### 64", "64") == {"score": 1.0, "acc": 1.0}


def test_arith_scores_a_wrong_answer_in_the_right_form_below_the_right_answer():
    """SmolLM2 after SFT answers in the form every time; a wrong sum must still lose to the right one, or GRPO has
    nothing to learn from (as it had when both scored 1.0)."""
    wrong = arith.compute_score("openai/gsm8k", "26 + 38 = 63\n#### 63", "64")
    assert wrong == {"score": 0.75, "acc": 0.0}
    unformatted = arith.compute_score("openai/gsm8k", "26 + 38 = 64", "64")
    assert unformatted == {"score": 0.5, "acc": 0.0}
    assert arith.compute_score("openai/gsm8k", "26 + 38 = 64\n#### 64", "64") == {"score": 1.0, "acc": 1.0}
