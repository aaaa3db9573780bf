"""What verl's agent-loop worker does for every sample, done once where the result is the same (a verl patch:
trainctl.runtime.verl_patches lists it, tests/runtime/test_verl_patches.py pins the code it replaces).

verl 0.9.1's AgentLoopWorker._run_agent_loop builds each sample's agent loop with `hydra.utils.instantiate` of the
registry's `{"_target_": "module.Class"}`: Hydra makes an OmegaConf config of the target and the eight objects it is
given, merges them, then locates the class by name and calls it with them. Measured with py-spy on the tiny GRPO
recipe's agent-loop worker: 14% of its CPU, which a step waited for (the worker was busy through most of the
generation phase: 0.70-0.80 s of it before, 0.60-0.64 s after, docs/guides/cpu.md). For such an entry (a class
target and nothing else, which is what verl's `@register` writes) the class is located once and called with the same
arguments: the same object as Hydra makes.
Any other entry (an agent-loop config file's, with arguments of its own) goes to Hydra as before.
"""

from __future__ import annotations

import functools
from typing import Any


@functools.cache
def _located(target: str):
    from hydra.utils import get_object

    return get_object(target)


def instantiate(original, config: Any, *args, **kwargs):
    """`hydra.utils.instantiate(config, **kwargs)` (`original`), without Hydra's config for a bare class target."""
    if not args and type(config) is dict and config.keys() == {"_target_"}:
        target = _located(config["_target_"])
        if isinstance(target, type):
            return target(**kwargs)
    return original(config, *args, **kwargs)


class _Utils:
    def __init__(self, utils):
        self._utils = utils

    def instantiate(self, config, *args, **kwargs):
        return instantiate(self._utils.instantiate, config, *args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._utils, name)


class Hydra:
    """The `hydra` module as verl's agent-loop module sees it: `hydra.utils.instantiate` with the fast path above,
    everything else Hydra's own."""

    def __init__(self, hydra):
        self._hydra = hydra
        self.utils = _Utils(hydra.utils)

    def __getattr__(self, name: str):
        return getattr(self._hydra, name)


def wrap_hydra(original):
    return Hydra(original)
