"""Did-you-mean suggestions for keys, group options, commands and option names."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(word: str, candidates: Iterable[str], n: int = 1, cutoff: float = 0.6) -> list[str]:
    """The candidates most like `word`, best first."""
    return difflib.get_close_matches(word, list(candidates), n=n, cutoff=cutoff)


def closest_key(key: str, known: set[str]) -> str | None:
    """The known dotted key a mistyped `key` most likely meant.

    Tries, in order: a close sibling under the longest prefix that exists (kl_ctrl.kl_coeff -> kl_ctrl.kl_coef),
    the same tail under another parent (actor.optim.lr -> actor_rollout_ref.actor.optim.lr), and a close match on
    the whole path.
    """
    parts = key.split(".")
    for i in range(len(parts) - 1, 0, -1):
        prefix = ".".join(parts[:i])
        if prefix not in known:
            continue
        rest = ".".join(parts[i:])
        siblings = {k[len(prefix) + 1 :] for k in known if k.startswith(prefix + ".")}
        match = closest(rest, siblings, cutoff=0.7)
        if match:
            return f"{prefix}.{match[0]}"
        break
    tails = sorted(k for k in known if k.endswith("." + key))
    if tails:
        return min(tails, key=len)
    match = closest(key, known, cutoff=0.8)
    return match[0] if match else None
