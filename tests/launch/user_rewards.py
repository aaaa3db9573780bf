"""Rewards a user might write first for the GRPO recipe (`reward=fn reward.fn=FILE.py:FUNCTION`), neither of them
arith's: the recipe's header says its settings move any simple reward of your own, and
tests/launch/test_learning.py checks that they do."""


def has_marker(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """1 when the response writes gsm8k's answer marker `####`, else 0."""
    return 1.0 if "####" in solution_str else 0.0


def digit_share(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """The share of the response's characters that are digits."""
    text = solution_str.strip()
    return sum(c.isdigit() for c in text) / len(text) if text else 0.0
