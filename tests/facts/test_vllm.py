"""trainctl keeps what vLLM's CPU build accepts as constants (importing vLLM costs seconds): they must match."""

from __future__ import annotations

import importlib.metadata

from trainctl.facts import vllm as facts


def test_cpu_facts_match_installed_vllm():
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    name, version = facts.CPU_BUILD.split("==")
    assert importlib.metadata.version(name) == version
    assert tuple(CPUAttentionBackend.get_supported_head_sizes()) == facts.CPU_HEAD_SIZES


def test_cpu_env_settings_exist_in_vllm():
    import vllm.envs

    for name in facts.CPU_ENV_DEFAULTS:
        assert name in vllm.envs.environment_variables
