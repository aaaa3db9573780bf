"""Classes that subclass verl's, built on first use.

verl imports trainctl's reward managers, rollout adapters and tools by dotted path (`pkg.module.ClassName`). Their
base classes live in verl, whose import costs seconds, so the modules that define them must stay importable without
verl (plan-time checks read their constants). Each such module declares its classes once:

    __getattr__ = lazy_classes(__name__, {"MCPTool": _tool_class})

and the factory runs (once per process) when verl, or anyone, first asks the module for that name.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


def lazy_classes(module: str, factories: dict[str, Callable[[], type]]) -> Callable[[str], Any]:
    """A module-level `__getattr__` that builds each named class with its factory on first access, then keeps it."""
    cached = {name: functools.cache(factory) for name, factory in factories.items()}

    def __getattr__(name: str) -> Any:
        if name in cached:
            cls = cached[name]()
            # pickling (Ray ships tool instances to workers) finds the class under the name verl used
            cls.__module__, cls.__qualname__ = module, name
            return cls
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
