"""trainctl keeps what vLLM's CPU build accepts as constants (importing vLLM costs seconds): they must match."""

from __future__ import annotations

import importlib.metadata

import pytest

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


@pytest.fixture
def short_tmp():
    """A folder with a short path (pytest's tmp_path alone can be too long for a Unix socket's)."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="tc-") as folder:
        yield Path(folder)


def test_vllms_sockets_go_to_trainctls_cache_where_their_paths_fit(short_tmp):
    """vLLM puts its ZeroMQ sockets in VLLM_RPC_BASE_PATH (an ipc:// path it does not make); a Unix socket's path
    holds 107 bytes: a cache folder too deep for one leaves vLLM's default."""
    import vllm.envs
    from vllm.utils.network_utils import get_open_zmq_ipc_path

    assert "VLLM_RPC_BASE_PATH" in vllm.envs.environment_variables
    env = facts.rpc_env(short_tmp, {})
    folder = short_tmp / facts.RPC_FOLDER
    assert env == {"VLLM_RPC_BASE_PATH": str(folder)} and folder.is_dir()
    assert facts.rpc_env(short_tmp, {"VLLM_RPC_BASE_PATH": "/run/mine"}) == {}, "the user's choice stands"
    deep = short_tmp / ("d" * (facts.SOCKET_PATH_MAX - len(str(short_tmp))))
    assert facts.rpc_env(deep, {}) == {} and not deep.exists()
    path = get_open_zmq_ipc_path().removeprefix("ipc://")
    assert len(path) - len(vllm.envs.VLLM_RPC_BASE_PATH) == 37, "/<uuid4> after the folder"
