"""pass@k: the chance that at least one of k samples drawn from a prompt's n is correct, estimated without bias.

The estimator of Chen et al. 2021 (Codex, "Evaluating Large Language Models Trained on Code"): with n samples of which
c are correct, pass@k = 1 - C(n-c, k) / C(n, k), averaged over prompts. Computed as a product, as in the paper, so
large n does not overflow: 1 - prod_{i=n-c+1}^{n} (1 - k / i).
"""

from __future__ import annotations

from collections.abc import Iterable


def pass_at_k(n: int, c: int, k: int) -> float:
    """One prompt: n samples, c of them correct."""
    if not 0 <= c <= n:
        raise ValueError(f"c = {c} correct of n = {n} samples")
    if not 1 <= k <= n:
        raise ValueError(f"k = {k} must be between 1 and n = {n}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def mean_pass_at_k(counts: Iterable[tuple[int, int]], k: int) -> float:
    """The mean over prompts of pass@k, each given as (n, c)."""
    values = [pass_at_k(n, c, k) for n, c in counts]
    return sum(values) / len(values) if values else float("nan")


def default_ks(n: int) -> list[int]:
    """1, 2, 4, ... up to n, and n itself."""
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return [*ks, n]
