"""trainctl's vLLM plugin (entry point group `vllm.general_plugins`): vLLM's CPU build starts its engines faster.

vLLM calls every general plugin in each of its processes before it builds an engine's config (EngineArgs), whoever
started it: trainctl's eval, chat and model serve, verl's rollout servers, a user's own vLLM. This one does nothing
unless vLLM runs on its CPU platform; there it applies trainctl.runtime.verl_patches.VLLM_CPU_START_PATCHES (the
model class inspected in the process rather than in a fresh Python: ~10 s of CPU less for each engine that starts
with a cold cache; a small vocabulary sampled without inductor's compile), and in vLLM's server as `trainctl model
serve` starts it (trainctl.facts.vllm.ENGINE_FORK_ENV) it has the engine's process forked rather than spawned.
"""

from __future__ import annotations


def register() -> None:
    """vLLM's entry point (called more than once in a process: the patches apply once)."""
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        import os

        from trainctl.facts.vllm import ENGINE_FORK_ENV
        from trainctl.runtime.verl_patches import apply_vllm_cpu_start

        apply_vllm_cpu_start()
        if os.environ.get(ENGINE_FORK_ENV) == "1":
            from trainctl.runtime.vllm_cpu import fork_engine_cores

            fork_engine_cores()
