"""The patches trainctl applies to verl where verl offers no hook. All of them, here, guarded to verl 0.9.1.

Each one replaces a module attribute with a wrapper that behaves exactly like the original unless the process
runs on trainctl's CPU platform. tests/backends/test_verl_patches.py pins the source of every patched function,
so a verl upgrade that changes them fails loudly instead of silently running something else.
"""

from __future__ import annotations

import logging
import os
from datetime import timedelta

logger = logging.getLogger(__name__)

VERL_VERSION = "0.9.1"

# module, function: why
PATCHES = {
    ("verl.utils.distributed", "initialize_global_process_group"): (
        "builds the backend string 'cpu:gloo,<device>:<backend>', which on the cpu device names cpu twice"
    ),
    ("verl.utils.distributed", "initialize_global_process_group_ray"): "the same, for processes Ray starts",
}

_APPLIED: dict[tuple[str, str], object] = {}


def _on_cpu() -> bool:
    from verl.utils.device import get_device_name

    return get_device_name() == "cpu"


def _initialize_global_process_group(original):
    def initialize_global_process_group(timeout_second=36000):
        if not _on_cpu():
            return original(timeout_second)
        import torch.distributed

        torch.distributed.init_process_group(
            backend="gloo",
            timeout=timedelta(seconds=timeout_second),
            init_method=os.environ.get("DIST_INIT_METHOD", None),
        )
        return int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

    return initialize_global_process_group


def _initialize_global_process_group_ray(original):
    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        if not _on_cpu():
            return original(timeout_second, backend)
        return original(timeout_second, backend="gloo")

    return initialize_global_process_group_ray


_WRAPPERS = {
    "initialize_global_process_group": _initialize_global_process_group,
    "initialize_global_process_group_ray": _initialize_global_process_group_ray,
}


def apply() -> None:
    """Apply every patch once; refuse on a verl version they were not written for."""
    import importlib

    import verl

    if verl.__version__ != VERL_VERSION:
        raise RuntimeError(
            f"trainctl's CPU support patches verl {VERL_VERSION}, but verl {verl.__version__} is installed: "
            f"install verl=={VERL_VERSION}, or run on GPUs (hardware=1gpu/8gpu/...)"
        )
    for module_name, func in PATCHES:
        if (module_name, func) in _APPLIED:
            continue
        module = importlib.import_module(module_name)
        original = getattr(module, func)
        setattr(module, func, _WRAPPERS[func](original))
        _APPLIED[(module_name, func)] = original
    logger.debug("trainctl applied %d verl patches", len(_APPLIED))


def original(module_name: str, func: str):
    """The unpatched function (for tests)."""
    return _APPLIED.get((module_name, func))
