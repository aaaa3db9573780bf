"""trainctl's verl patches are pinned to verl 0.9.1's source: a verl upgrade that changes it fails here."""

from __future__ import annotations

import hashlib
import inspect
import subprocess
import sys

from trainctl.backends import verl_patches

# sha256 of the source of each patched function in verl 0.9.1
PINNED = {
    ("verl.utils.distributed", "initialize_global_process_group"): (
        "33a5452c4dde00591e00692a5f967cc7b424a3b7ebd9da7cb23697209ddbd0e1"
    ),
    ("verl.utils.distributed", "initialize_global_process_group_ray"): (
        "761a94d1a2e058d31a0ac231c89a142abf5daf822e333bac75e84cafcf7507ac"
    ),
}


def _source_digest(module: str, func: str) -> str:
    import importlib

    fn = verl_patches.original(module, func) or getattr(importlib.import_module(module), func)
    return hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()


def test_patched_functions_are_what_the_patches_were_written_for():
    import verl

    assert verl.__version__ == verl_patches.VERL_VERSION
    assert set(PINNED) == set(verl_patches.PATCHES)
    for (module, func), digest in PINNED.items():
        got = _source_digest(module, func)
        assert got == digest, f"verl changed {module}.{func}: review trainctl.backends.verl_patches"


def test_the_backend_string_verl_builds_still_names_the_device_twice():
    """The reason for the process-group patch: if verl stops doing this, the patch can go."""
    import verl.utils.distributed as dist

    fn = verl_patches.original("verl.utils.distributed", "initialize_global_process_group")
    src = inspect.getsource(fn or dist.initialize_global_process_group)
    assert 'f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"' in src


def test_plugin_is_inert_without_verl_platform_cpu():
    code = (
        "import os; os.environ.pop('VERL_PLATFORM', None)\n"
        "import verl\n"
        "from verl.plugin.platform import PlatformRegistry\n"
        "from trainctl.backends import verl_cpu\n"
        "print(verl_cpu._INSTALLED, 'cpu' in PlatformRegistry.registered_names())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "False False"


def test_plugin_selects_the_cpu_platform_when_asked():
    code = (
        "import verl\n"
        "from verl.utils.device import get_device_name, get_nccl_backend\n"
        "from verl.workers.engine.base import EngineRegistry\n"
        "print(get_device_name(), get_nccl_backend(), 'cpu' in EngineRegistry._engines['language_model']['fsdp2'])\n"
    )
    env = {**__import__("os").environ, "VERL_PLATFORM": "cpu"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out.strip().splitlines()[-1] == "cpu gloo True"
