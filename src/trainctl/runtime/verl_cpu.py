"""A `cpu` platform for verl 0.9.1, through verl's own extension points.

What verl offers, and what is used:
  - PlatformRegistry.register / set_platform: a platform whose device is torch's CPU and whose collective
    backend is gloo;
  - EngineRegistry.register(..., device="cpu"): verl's FSDP engines, which are registered for cuda and npu only;
  - RolloutReplicaRegistry.register and _ROLLOUT_REGISTRY: the `hf` rollout (trainctl.runtime.hf_rollout),
    which samples with transformers, for the PPO family; and verl's own `vllm` rollout placed without accelerator
    ids, for vLLM's CPU build (trainctl.runtime.vllm_cpu);
Where verl leaves no hook, trainctl.runtime.verl_patches (the process group's backend string, the GPU count of
the resource pools, pinned memory for the reference model, flash-attn for the critic, the replay buffer's 2-second
poll).
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import psutil
import torch

from trainctl.runtime.lazy import lazy_classes

logger = logging.getLogger(__name__)


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


def _zero(*args: Any, **kwargs: Any) -> int:
    return 0


def _mem_get_info(*args: Any, **kwargs: Any) -> tuple[int, int]:
    vm = psutil.virtual_memory()
    return vm.available, vm.total


class _CPUDeviceModule(SimpleNamespace):
    """What verl calls on `get_torch_device()`, for the CPU: torch.cpu plus no-op memory management."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)


CPU_DEVICE = _CPUDeviceModule(
    is_available=lambda: True,
    device_count=lambda: 1,
    current_device=lambda: "cpu",
    set_device=_noop,
    synchronize=_noop,
    empty_cache=_noop,
    ipc_collect=_noop,
    memory_allocated=_zero,
    memory_reserved=_zero,
    max_memory_allocated=_zero,
    max_memory_reserved=_zero,
    reset_peak_memory_stats=_noop,
    mem_get_info=_mem_get_info,
    set_per_process_memory_fraction=_noop,
    get_rng_state=lambda *a, **k: torch.get_rng_state(),
    set_rng_state=lambda state, *a, **k: torch.set_rng_state(state),
    manual_seed=torch.manual_seed,
    manual_seed_all=torch.manual_seed,
    get_device_name=lambda *a: "cpu",
)


def _platform_class():
    from verl.plugin.platform import PlatformBase

    class PlatformCPU(PlatformBase):
        """The host CPU as a verl platform: gloo collectives, Ray's CPU resource for placement."""

        device_name = "cpu"
        vendor_name = "cpu"
        device_module = CPU_DEVICE

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            return False  # never auto-detected: selected only by VERL_PLATFORM=cpu

        def current_device(self) -> str:
            # verl passes this to .to() and torch.device(): an index would mean accelerator 0
            return "cpu"

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            pass

        def synchronize(self, device_index: int | None = None) -> None:
            pass

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            pass

        def empty_cache(self) -> None:
            pass

        def get_device_capability(self, device_index: int = 0):
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "TRAINCTL_VISIBLE_CPUS"

        @contextmanager
        def nvtx_range(self, msg: str):
            yield

        def profiler_start(self) -> None:
            pass

        def profiler_stop(self) -> None:
            pass

        def ray_resource_name(self) -> str:
            return "CPU"

        def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
            # one CPU per "device": Ray places the workers without counting GPUs
            return {"num_cpus": num_gpus}

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False

        def rollout_env_vars(self) -> dict[str, str]:
            # the settings of vLLM's CPU build for the rollout's servers (trainctl.runtime.vllm_cpu)
            from trainctl.facts.vllm import cpu_env

            return cpu_env()

        def get_collective_module(self) -> Any:
            return None

        def cudart(self) -> Any:
            return None

    return PlatformCPU


# built on first use (verl's PlatformBase is imported with verl), under a name pickle finds
__getattr__ = lazy_classes(__name__, {"PlatformCPU": _platform_class})


def _register_engines(engine_package=None) -> None:
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead, FSDPEngineWithValueHead

    registry = EngineRegistry._engines
    for model_type, cls in (("language_model", FSDPEngineWithLMHead), ("value_model", FSDPEngineWithValueHead)):
        for backend in ("fsdp", "fsdp2"):
            if "cpu" not in registry.get(model_type, {}).get(backend, {}):
                EngineRegistry.register(model_type=model_type, backend=backend, device="cpu")(cls)


def _register_rollouts(registry_module=None) -> None:
    from trainctl.runtime import hf_rollout, vllm_cpu

    hf_rollout.register()
    vllm_cpu.register()


_INSTALLED = False


def install() -> None:
    """Register and select the CPU platform, its engines and the gloo process group (idempotent)."""
    global _INSTALLED
    if _INSTALLED:
        return
    from verl.plugin.platform import PlatformRegistry, set_platform

    from trainctl.runtime import verl_patches

    cls = __getattr__("PlatformCPU")
    PlatformRegistry.register(platform="cpu")(cls)
    set_platform(cls())
    verl_patches.apply()
    # registered as a process imports verl's registries, not imported for them: the driver never does (its engines
    # and rollout configs cost it 3.5 s), each worker those of its kind
    import wrapt

    wrapt.register_post_import_hook(_register_engines, "verl.workers.engine")
    for registry in ("verl.workers.rollout.base", "verl.workers.rollout.replica"):
        wrapt.register_post_import_hook(_register_rollouts, registry)
    _INSTALLED = True
    logger.info("trainctl: verl runs on the CPU platform (gloo)")
