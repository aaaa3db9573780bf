"""What verl does in every step that a CPU run pays for beyond what it computes, done once or not at all where the
result is the same (verl patches: trainctl.runtime.verl_patches lists them, tests/runtime/test_verl_patches.py pins
the code they replace).

Each sample's agent loop. verl 0.9.1's AgentLoopWorker._run_agent_loop builds each sample's agent loop with
`hydra.utils.instantiate` of the registry's `{"_target_": "module.Class"}`: Hydra makes an OmegaConf config of the
target and the eight objects it is given, merges them, then locates the class by name and calls it with them.
Measured with py-spy on the tiny GRPO recipe's agent-loop worker: 14% of its CPU, which a step waited for (the worker
was busy through most of the generation phase: 0.70-0.80 s of it before, 0.60-0.64 s after, docs/guides/cpu.md). For
such an entry (a class target and nothing else, which is what verl's `@register` writes) the class is located once
and called with the same arguments: the same object as Hydra makes. Any other entry (an agent-loop config file's,
with arguments of its own) goes to Hydra as before.

Each micro-batch of a training pass. FSDPEngineWithLMHead.forward_step starts with `micro_batch.to(device)`. The
micro-batch's tensors are in CPU memory already on the cpu platform, but the TensorDict names no device, so
tensordict rebuilds every non-tensor entry (a tensorclass per sample and field: the prompt, the reward's ground
truth, the agent loop's metrics...) to say "cpu": 0.11-0.13 s of the tiny recipe's 0.45-0.52 s reference pass on a
host ~3x slower than a quiet one, and as much of the update (docs/guides/cpu.md). On the cpu platform the
micro-batch comes in as the same entries under a TensorDict that names the cpu device, which `to` returns as it is.

Each sample's reward. The agent loop scores each finished sample with a Ray call to one of verl's reward workers
(`compute_score.remote(DataProto)`): the sample is encoded, sent, decoded, scored, and the answer sent back, one call a
sample. On a CPU the rule-based scorers (reward=rule, fn: verl's registered managers without a reward model) take a
fraction of a millisecond, and the call costs the agent-loop worker (busy through most of the generation phase) and
the reward worker's process CPU the step waits for. On the cpu platform such a run's agent-loop worker scores in its
own process with verl's RewardLoopWorker (the same class, config and manager the reward worker runs, built at the
first sample): the same score from the same code. Managers trainctl loads by module (reward=model, judge) batch model
passes or calls of the samples arriving together in their workers, and a reward model is not one the agent loop should
wait for: they stay in their workers.

Each TransferQueue put and get. TransferQueue 0.1.11 limits torch's threads around every put and get, in the client
and in the storage unit, to TQ_NUM_THREADS (8 unless set), clamped to the machine's physical cores: it asks psutil for
that count each time (a sysfs glob, 0.2-0.5 ms), and where the machine has fewer than 8 it logs a warning each time,
which Ray's log monitor ships to the driver (~300 lines in 6 s of the tiny recipe, each put in two formats). The count
is read once per process, and TQ_NUM_THREADS is the value TransferQueue clamps it to: the same threads, no warning.
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


def on_the_cpu(micro_batch):
    """`micro_batch.to("cpu")` on the cpu platform, where every tensor is in CPU memory: the same entries (each the
    very object) under a TensorDict that names the cpu device. Anything else (a lazy stack, a locked or named
    TensorDict, one that names a device) is returned as it is, for verl's own `to`."""
    from tensordict import TensorDict

    if (
        type(micro_batch) is not TensorDict
        or micro_batch.device is not None
        or micro_batch.is_locked
        or any(name is not None for name in micro_batch.names)
    ):
        return micro_batch
    # tensordict's constructor would move (rebuild) each entry to the device: the entries are kept as they are
    entries = dict(micro_batch.items())
    return TensorDict._new_unsafe(entries, batch_size=micro_batch.batch_size, device="cpu", nested=False)


def wrap_forward_step(original):
    @functools.wraps(original)
    def forward_step(self, micro_batch, loss_function, forward_only):
        from verl.utils.device import get_device_name

        if get_device_name() == "cpu":
            micro_batch = on_the_cpu(micro_batch)
        return original(self, micro_batch, loss_function, forward_only)

    return forward_step


def scores_in_process(config: Any) -> bool:
    """Whether the agent loop should score each sample in its own process: on the cpu platform, for verl's
    registered reward managers without a reward model."""
    from verl.utils.device import get_device_name

    reward = config.reward
    return (
        get_device_name() == "cpu"
        and not reward.reward_model.enable
        and reward.reward_manager.get("source", "register") == "register"
    )


class InProcessRewardWorker:
    """Stands for a reward worker's actor handle in the agent loop (`await handle.compute_score.remote(data)`):
    verl's RewardLoopWorker in this process, built inside the running event loop (its manager keeps the loop it is
    built in for its executor calls) at the first sample."""

    def __init__(self, config: Any):
        self._config = config
        self._worker = None
        self.compute_score = self

    def remote(self, data):
        return self._score(data)

    async def _score(self, data) -> dict:
        if self._worker is None:
            from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

            self._worker = RewardLoopWorker(self._config)
        return await self._worker.compute_score(data)


def wrap_agent_loop_worker_init(original):
    @functools.wraps(original)
    def __init__(self, config, *args, **kwargs):
        original(self, config, *args, **kwargs)
        if self.reward_loop_worker_handles and scores_in_process(config):
            self.reward_loop_worker_handles = [InProcessRewardWorker(config)]

    return __init__


class CoreCount:
    """psutil as TransferQueue's thread limiter sees it: the physical core count read once, the rest psutil's."""

    def __init__(self, psutil):
        self._psutil = psutil

    @functools.cached_property
    def _physical(self) -> int | None:
        return self._psutil.cpu_count(logical=False)

    def cpu_count(self, logical: bool = True) -> int | None:
        return self._psutil.cpu_count(logical=True) if logical else self._physical

    def __getattr__(self, name: str):
        return getattr(self._psutil, name)


def wrap_psutil(original):
    return CoreCount(original)


def wrap_tq_num_threads(original: int) -> int:
    """TQ_NUM_THREADS as TransferQueue uses it on the cpu platform: at most the physical cores (what it clamps to,
    with a warning)."""
    import psutil
    from verl.utils.device import get_device_name

    if get_device_name() != "cpu":
        return original

    cores = psutil.cpu_count(logical=False)
    return min(original, cores) if cores else original
