"""Small arithmetic for batch-size checks and the smallest fixes they suggest."""

from __future__ import annotations

import math


def neighbours(value: int, step: int, minimum: int = 1) -> list[int]:
    """The multiples of `step` nearest to `value` from below and above (at least `minimum`)."""
    below = value // step * step
    above = below + step
    return [v for v in (below, above) if v >= minimum and v != value]


def step_for(n: int, ranks: int) -> int:
    """The smallest batch increment b such that b * n divides evenly across `ranks`."""
    return ranks // math.gcd(n, ranks)


def divisors_near(total: int, target: int) -> list[int]:
    """Divisors of `total` closest to `target`: the largest not above it, and the smallest above it."""
    divs = [d for d in range(1, total + 1) if total % d == 0]
    below = [d for d in divs if d <= target and d != target]
    above = [d for d in divs if d > target]
    return [*(below[-1:]), *(above[:1])]


def fix(key: str, values: list[int]) -> str:
    """`smallest fix: key=a or b`."""
    return f"smallest fix: {key}=" + " or ".join(str(v) for v in values)
