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

Each sample's TransferQueue put. verl's TQ agent-loop worker puts each finished sample into TransferQueue on its own
(`async_kv_batch_put` of one row), and each prompt's status twice (running, then finished): a round trip to the
controller for the sample's metadata, one to the storage unit, one to tell the controller, each coroutine in turn. In
the tiny recipe's generation phase the worker spent 0.8 s after the last token was sampled putting its 64 samples
one by one (timestamps in the worker). On the cpu platform the worker's puts wait while one is in flight and then go
together, as one put of every row waiting (one TensorDict: `list_of_dict_to_tensordict` over all of them, as verl
builds one for a sample of several outputs) and one of every status: each coroutine's put returns once its rows are
stored, so a prompt's finished status still follows its samples. TransferQueue stores a put's rows one by one: what
the trainer reads back is the same (types, values, tags: checked against TransferQueue itself). The tiny GRPO step
2.45-2.49 -> 2.10-2.15 s on a slow host (its generation phase 1.26 -> 0.91-0.94 s).

Each training pass's fields. verl's actor, reference and critic workers get a pass's samples by their TransferQueue
metadata, and fetch every field the samples have: with them the ones verl's dataset and agent loop add for the reward,
the metrics and the rollout dumps (the prompt's text and chat, its ground truth, its tool and interaction arguments,
the agent loop's metrics...), each a tensorclass per sample and field as TransferQueue packs it, which no training pass
reads: 0.04 s of the tiny recipe's 0.30 s reference pass on a slow host (the update's fetch is of the same fields; its
change was within its runs' spread). On the cpu platform those passes fetch the samples without them
(UNREAD_BY_TRAINING, where they are not tensors): the same tensors.

The log-probabilities. Without flash-attn's cross-entropy (always, on a CPU) verl's logprobs_from_logits falls back to
a Python loop of one logsumexp per token over the packed (tokens, vocab) logits; on the cpu platform the same values
are computed over as many rows at a time as fit in CPU_LOGSUMEXP_CHUNK_ELEMENTS.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

# elements of logits per logsumexp on the cpu platform: a 16 MB temporary in fp32, whatever the vocabulary (verl's
# row-at-a-time loop bounds memory too, at one Python iteration per token)
CPU_LOGSUMEXP_CHUNK_ELEMENTS = 1 << 22


def _on_cpu() -> bool:
    from verl.utils.device import get_device_name

    return get_device_name() == "cpu"


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


# the non-tensor fields verl 0.9.1's dataset (RLHFDataset), agent loop and trainer add to each sample for the reward,
# the metrics and the rollout dumps; its training passes (engine_workers, the engines' forward steps, losses.py) read
# none of them. A field not named here is fetched, whatever it is
UNREAD_BY_TRAINING = frozenset(
    {
        "ability", "data_source", "extra_fields", "extra_info", "global_steps", "index", "interaction_kwargs",
        "metrics", "num_turns", "prompt", "raw_prompt", "reward_model", "session_id", "tools_kwargs", "uid",
    }
)  # fmt: skip


def without_unread_fields(meta):
    """A TransferQueue BatchMeta without its non-tensor fields in UNREAD_BY_TRAINING; anything else as it is."""
    from transfer_queue.metadata import BatchMeta

    if type(meta) is not BatchMeta:
        return meta
    schema = meta.field_schema
    unread = {f for f in meta.field_names if f in UNREAD_BY_TRAINING and schema[f].get("is_non_tensor")}
    return meta.select_fields([f for f in meta.field_names if f not in unread]) if unread else meta


def wrap_training_pass(original):
    """A training worker's pass (ActorRolloutRefWorker.update_actor, ...) that fetches its samples' fields without
    those no pass reads, on the cpu platform. functools.wraps keeps what verl's `@register` marked the method with
    (its dispatch mode): the worker group binds it as before."""

    @functools.wraps(original)
    def training_pass(self, data, *args, **kwargs):
        if _on_cpu():
            data = without_unread_fields(data)
        return original(self, data, *args, **kwargs)

    return training_pass


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
        # RewardLoopWorker.compute_score, for the configs scores_in_process admits (no reward model): its manager's
        # run_single on either branch, without its two reads of the config for each sample
        return await self._worker.reward_manager.run_single(data)


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


def logprobs_in_chunks(logits, labels, chunk_elements: int = CPU_LOGSUMEXP_CHUNK_ELEMENTS):
    """log_softmax(logits)[labels] as verl's logprobs_from_logits_v2 computes it for fp32/fp64 (the label's logit
    minus the row's logsumexp), over as many rows at once as fit in `chunk_elements`: the same values, bit for bit
    (tests/runtime/test_step_speed.py), without a Python iteration per token."""
    import torch

    vocab = logits.shape[-1]
    rows = logits.reshape(-1, vocab)
    label_logits = torch.gather(logits, dim=-1, index=labels.unsqueeze(-1)).squeeze(-1)
    per_chunk = max(1, chunk_elements // vocab)
    logsumexp = torch.cat([torch.logsumexp(chunk, dim=-1) for chunk in rows.split(per_chunk)])
    return label_logits - logsumexp.view(label_logits.shape)


def wrap_logprobs_from_logits(original):
    import torch

    @functools.wraps(original)
    def logprobs_from_logits(logits, labels, inplace_backward=True):
        if not _on_cpu() or logits.dtype not in (torch.float32, torch.float64):
            return original(logits, labels, inplace_backward)
        return logprobs_in_chunks(logits, labels)

    return logprobs_from_logits


class Rows(list):
    """A sample's rows as verl's TQ agent loop hands them to `list_of_dict_to_tensordict` before its put: kept as they
    are on the cpu platform, where its puts go through CoalescedPuts, which puts them with the other puts' rows."""


def wrap_list_of_dict_to_tensordict(original):
    # decided where it runs, as wrap_transfer_queue is: Ray sends the worker class's module globals by value, this
    # wrapper and the stand-in among them, and each asks the worker's own platform
    @functools.wraps(original)
    def list_of_dict_to_tensordict(rows):
        return Rows(rows) if _on_cpu() else original(rows)

    return list_of_dict_to_tensordict


class _Put:
    """One put as the agent loop asked for it: its rows (Rows), or its tags alone; `done` once it is stored."""

    def __init__(self, partition_id: str, keys: list[str], rows: Rows | None, tags: list[dict] | None):
        self.partition_id, self.keys, self.rows, self.tags = partition_id, list(keys), rows, tags
        self.done = asyncio.get_running_loop().create_future()

    def kind(self) -> tuple:
        """Puts of a kind go as one: the same partition, rows of the same fields (verl builds a put's columns from its
        first row's fields) or tags alone."""
        return self.partition_id, None if self.rows is None else tuple(self.rows[0]), self.tags is None


class CoalescedPuts:
    """The `transfer_queue` module as verl's TQ agent-loop worker sees it on the cpu platform: puts of rows (Rows) and
    of tags alone wait while a put is in flight, then go as one put of each kind; everything else is TransferQueue's."""

    def __init__(self, tq, to_tensordict):
        self._tq = tq
        self._to_tensordict = to_tensordict
        self._waiting: list[_Put] = []
        self._flushing: asyncio.Task | None = None

    def __getattr__(self, name: str):
        if name.startswith("_"):  # not yet set (unpickling)
            raise AttributeError(name)
        return getattr(self._tq, name)

    def __reduce__(self):
        # Ray ships verl's agent-loop worker class to its process by value, with the globals its methods use
        return _coalesced_transfer_queue, ()

    async def async_kv_batch_put(self, keys, partition_id, fields=None, tags=None, **kwargs):
        if kwargs or not (fields is None or isinstance(fields, Rows)) or (fields is None and tags is None):
            if isinstance(fields, Rows):
                fields = self._to_tensordict(fields)
            return await self._tq.async_kv_batch_put(
                keys=keys, partition_id=partition_id, fields=fields, tags=tags, **kwargs
            )
        return await self._queue(_Put(partition_id, keys, fields, tags))

    async def async_kv_put(self, key, partition_id, fields=None, tag=None, **kwargs):
        if kwargs or fields is not None or tag is None:
            return await self._tq.async_kv_put(key=key, partition_id=partition_id, fields=fields, tag=tag, **kwargs)
        return await self._queue(_Put(partition_id, [key], None, [tag]))

    async def _queue(self, put: _Put):
        self._waiting.append(put)
        if self._flushing is None:
            self._flushing = asyncio.ensure_future(self._flush())
        return await put.done

    async def _flush(self) -> None:
        groups: list[list[_Put]] = []
        try:
            while self._waiting:
                waiting, self._waiting = self._waiting, []
                groups = together(waiting)
                while groups:
                    await self._put(groups[0])
                    groups.pop(0)
        except BaseException:  # cancelled (the worker's event loop closing): no put is left waiting on this flush
            for put in [*(p for group in groups for p in group), *self._waiting]:
                put.done.cancel()
            self._waiting = []
            raise
        finally:
            self._flushing = None

    async def _put(self, group: list[_Put]) -> None:
        first = group[0]
        try:
            rows = None if first.rows is None else self._to_tensordict([row for put in group for row in put.rows])
        except Exception:  # rows that cannot share columns (a tensor ragged past its first dimension): each on its own
            for put in group:
                try:
                    rows = self._to_tensordict(put.rows)
                except Exception as err:  # as it would have failed in verl's own put
                    _fail([put], err)
                    continue
                await self._put_as_one([put], rows)
            return
        await self._put_as_one(group, rows)

    async def _put_as_one(self, group: list[_Put], rows) -> None:
        try:
            stored = await self._tq.async_kv_batch_put(
                keys=[key for put in group for key in put.keys],
                partition_id=group[0].partition_id,
                fields=rows,
                tags=None if group[0].tags is None else [tag for put in group for tag in put.tags],
            )
        except Exception as err:  # each waiting put fails as its own would have
            _fail(group, err)
            return
        for put in group:
            if not put.done.done():  # its caller may have been cancelled
                put.done.set_result(stored)


def _fail(puts: list[_Put], err: Exception) -> None:
    for put in puts:
        if not put.done.done():  # its caller may have been cancelled
            put.done.set_exception(err)


def together(puts: list[_Put]) -> list[list[_Put]]:
    """The puts in groups that go as one: of a kind (_Put.kind), no key twice in a group (each key's puts in order)."""
    groups: list[tuple[list[_Put], set[str]]] = []
    latest: dict[tuple, tuple[list[_Put], set[str]]] = {}
    for put in puts:
        group = latest.get(put.kind())
        if group is None or not group[1].isdisjoint(put.keys):
            group = latest[put.kind()] = ([], set())
            groups.append(group)
        group[0].append(put)
        group[1].update(put.keys)
    return [members for members, _ in groups]


def _coalesced_transfer_queue():
    import transfer_queue

    return wrap_transfer_queue(transfer_queue)


def wrap_transfer_queue(original):
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    return CoalescedPuts(original, list_of_dict_to_tensordict) if _on_cpu() else original
