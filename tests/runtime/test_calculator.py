"""The built-in calculator's arithmetic: Python's parser, a whitelist of nodes, bounded sizes."""

from __future__ import annotations

import pytest

from trainctl.runtime.tools.calculator import CalculatorError, calculate


@pytest.mark.parametrize(
    "expression,value",
    [
        ("6 * 7", "42"),
        ("12 * (3 + 4)", "84"),
        ("-3 - -4", "1"),
        ("7 / 2", "3.5"),
        ("8 / 4", "2"),
        ("7 // 2", "3"),
        ("-7 % 3", "2"),
        ("2 ** 10", "1024"),
        ("1 / 3", "0.3333333333"),
        (" 1.5e3 + 1 ", "1501"),
    ],
)
def test_arithmetic(expression, value):
    assert calculate(expression) == value


@pytest.mark.parametrize(
    "expression,reason",
    [
        ("__import__('os').system('true')", "unsupported syntax"),
        ("(1).__class__", "unsupported syntax"),
        ("x + 1", "unsupported syntax: 'x'"),
        ("[1, 2][0]", "unsupported syntax"),
        ("True + 1", "unsupported syntax: 'True'"),
        ("'a' * 3", "unsupported syntax"),
        ("1 / 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("9 ** 9 ** 9", "exponent 387420489 is too large"),
        ("10 ** 60 * 10 ** 60", "the result is too large"),
        ("(-8) ** 0.5", "not a real number"),
        ("1 +", "not an arithmetic expression"),
        ("", "the expression is empty"),
        ("1" * 201, "too long (201 characters"),
    ],
)
def test_what_it_refuses(expression, reason):
    with pytest.raises(CalculatorError, match=reason.replace("(", r"\(").replace("*", r"\*")):
        calculate(expression)
