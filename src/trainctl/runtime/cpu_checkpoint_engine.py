"""A checkpoint engine for CPU processes (`checkpoint_engine.backend=gloo`): how offpolicy=split sends the trainer's
weights to a rollout pool of its own on hardware=cpu.

verl 0.9.1's separate_async trainer moves weights through a CheckpointEngine (verl/checkpoint_engine/base.py): after
each sync interval the trainer's ranks call send_weights with the FSDP engine's per-tensor generator and every
rollout process's CheckpointEngineWorker calls receive_weights, whose (name, tensor) pairs it hands to the rollout's
server adapter (for trainctl's `hf` rollout: HFServerAdapter ships them to its HFRolloutServer). Every engine verl
ships other than `naive` (which only reaches servers in the trainer's own processes) needs CUDA or an NPU. verl imports
this module in each process that builds an engine (`checkpoint_engine.custom_backend_module`), which registers it.

The transport is a torch.distributed gloo broadcast in buckets, as verl's NCCL engine (nccl_checkpoint_engine.py)
broadcasts over NCCL: trainer rank 0 and each rollout process form a gloo group of their own (a ProcessGroupGloo on a
TCPStore the trainer's rank 0 serves: not the training's default group, which these processes already have), the
other trainer ranks only walk the generator (each tensor's full_tensor() is a collective of the training group).
Why gloo rather than Ray's object store or shared memory: one broadcast reaches every rollout process at once, on one
node or across Ray nodes (shared memory would not cross nodes); nothing waits in the object store for a reader to
fetch it; and it keeps verl's engine shape (prepare, build_topology, init_process_group, bucketed send and receive),
so verl's CheckpointEngineManager drives it unchanged. A bucket travels as a header (its sizes), then one payload:
the pickled TensorMeta list and the bytes of its chunks; the next bucket is gathered while the last one is broadcast.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
import socket
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from verl.checkpoint_engine.base import (
    CheckpointEngine,
    CheckpointEngineRegistry,
    TensorMeta,
    merge_weight_chunks,
    split_weight_chunks,
)
from verl.workers.rollout.utils import ensure_async_iterator

logger = logging.getLogger(__name__)

BACKEND = "gloo"
# this module, for verl's checkpoint_engine.custom_backend_module (conf/mapping/verl_ppo.yaml)
MODULE = __name__
# a bucket's header: [pickled metadata bytes, payload bytes, last bucket (0/1)]
_HEADER = 3
# every chunk starts at a multiple of this in the payload: the receiver views its bytes as the tensor's dtype, which
# torch allows only at an offset its element size divides
_ALIGN = 64


def _aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


@dataclass
class Master:
    """Where the group's store listens (trainer rank 0), and which sync this is: each sync builds a group anew under
    a prefix of its own, so a rollout pool that grew or shrank between syncs is met as it is."""

    host: str
    port: int
    sync: int


def node_ip() -> str:
    try:
        import ray

        if ray.is_initialized():
            return ray.util.get_node_ip_address().strip("[]")
    except Exception:  # outside Ray (the unit test): the loopback
        pass
    return "127.0.0.1"


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def gloo_group(store: dist.Store, rank: int, world_size: int, host: str, timeout_s: float) -> dist.ProcessGroup:
    """A gloo group of its own over `store` (the process's default group, if any, is left alone), bound to `host`."""
    options = dist.ProcessGroupGloo._Options()
    options._devices = [dist.ProcessGroupGloo.create_device(hostname=host)]
    options._timeout = timedelta(seconds=timeout_s)
    return dist.ProcessGroupGloo(store, rank, world_size, options)


def broadcast(group: dist.ProcessGroup, tensor: torch.Tensor) -> None:
    opts = dist.BroadcastOptions()
    opts.rootRank = 0
    group.broadcast([tensor], opts).wait()


@CheckpointEngineRegistry.register(BACKEND)
class GlooCheckpointEngine(CheckpointEngine):
    """Weights from the trainer's rank 0 to every rollout process, over a gloo broadcast in buckets of
    `bucket_size` bytes (verl's checkpoint_engine.update_weights_bucket_megabytes). Buffers are allocated per bucket
    at the bucket's size, not held between syncs: on a CPU they are the host memory the model lives in too."""

    def __init__(self, bucket_size: int, is_master: bool = False, timeout_s: float = 600.0, **_: Any) -> None:
        self.bucket_size = bucket_size
        self.is_master = is_master
        self.timeout_s = timeout_s
        self.host = node_ip()
        self.rank: int | None = None
        self.world_size: int | None = None
        self.group: dist.ProcessGroup | None = None
        self.syncs = 0
        self._store: dist.TCPStore | None = None  # the master's, kept for the engine's life
        self.last: dict[str, float] = {}  # the figures of the last send or receive
        if is_master:
            self.port = free_port(self.host)
            self._store = dist.TCPStore(
                self.host, self.port, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=timeout_s)
            )

    # --- the topology: verl's CheckpointEngineManager.build_process_group calls these before every sync ---
    def prepare(self) -> dict[str, Any]:
        if not self.is_master:
            return {"master": None}
        self.syncs += 1
        return {"master": Master(self.host, self.port, self.syncs)}

    @classmethod
    def build_topology(cls, actor_wg_world_size: int, rollout_world_size: int, metadata: list[dict]):
        master = metadata[0]["master"]
        assert master is not None, "the trainer's rank 0 must be the gloo checkpoint engine's master"
        world_size = 1 + rollout_world_size
        actor = {
            "rank": [0] + [-1] * (actor_wg_world_size - 1),
            "world_size": [world_size] * actor_wg_world_size,
            "master": [master] * actor_wg_world_size,
        }
        rollout = {
            "rank": list(range(1, world_size)),
            "world_size": [world_size] * rollout_world_size,
            "master": [master] * rollout_world_size,
        }
        return actor, rollout

    def init_process_group(self, rank: int, world_size: int, master: Master) -> None:
        self.rank, self.world_size = rank, world_size
        if rank < 0:  # a trainer rank that only walks the generator
            return
        store = self._store
        if store is None:
            store = dist.TCPStore(master.host, master.port, is_master=False, timeout=timedelta(seconds=self.timeout_s))
        prefixed = dist.PrefixStore(f"trainctl-weights/{master.sync}", store)
        self.group = gloo_group(prefixed, rank, world_size, self.host, self.timeout_s)

    def finalize(self) -> None:
        self.group = None

    # --- the trainer's side ---
    @torch.no_grad()
    async def send_weights(self, weights, global_steps: int | None = None) -> dict[str, float]:
        assert self.rank is not None and self.rank <= 0, "rollout processes do not send weights"
        if self.rank < 0:
            async for _ in ensure_async_iterator(weights):
                pass
            return {}
        start, sent, buckets = time.perf_counter(), 0, 0
        pending: asyncio.Future | None = None
        metas: list[TensorMeta] = []
        parts: list[torch.Tensor] = []
        size = 0
        async for meta, chunk in split_weight_chunks(weights, self.bucket_size):
            if size + meta.chunk_size > self.bucket_size and metas:
                if pending is not None:
                    await pending
                pending = asyncio.ensure_future(asyncio.to_thread(self._send_bucket, metas, parts, False))
                sent, buckets, metas, parts, size = sent + size, buckets + 1, [], [], 0
            meta.offset = size
            metas.append(meta)
            parts.append(chunk.detach().to("cpu").contiguous().view(torch.uint8))
            size = _aligned(size + meta.chunk_size)
        if pending is not None:
            await pending
        await asyncio.to_thread(self._send_bucket, metas, parts, True)
        sent, buckets = sent + size, buckets + 1
        seconds = time.perf_counter() - start
        self.last = {"seconds": seconds, "megabytes": sent / 2**20, "buckets": buckets}
        logger.info("gloo checkpoint engine: sent %.1f MB in %d bucket(s) in %.3f s", sent / 2**20, buckets, seconds)
        prefix = f"checkpoint_engine/{BACKEND}"
        return {f"{prefix}/send_s": seconds, f"{prefix}/megabytes": sent / 2**20}

    def _send_bucket(self, metas: list[TensorMeta], parts: list[torch.Tensor], last: bool) -> None:
        described = pickle.dumps(metas)
        head = _aligned(len(described))
        end = metas[-1].offset + metas[-1].chunk_size if metas else 0
        payload = torch.zeros(head + _aligned(end), dtype=torch.uint8)
        payload[: len(described)] = torch.frombuffer(bytearray(described), dtype=torch.uint8)
        for meta, part in zip(metas, parts, strict=True):
            payload[head + meta.offset : head + meta.offset + meta.chunk_size] = part
        broadcast(self.group, torch.tensor([len(described), payload.numel(), int(last)], dtype=torch.int64))
        broadcast(self.group, payload)

    # --- a rollout process's side ---
    @torch.no_grad()
    async def receive_weights(self, global_steps: int | None = None):
        async for name, weight in merge_weight_chunks(self._receive_chunks(), self.bucket_size):
            yield name, weight

    async def _receive_chunks(self):
        assert self.rank is not None and self.rank > 0, "the trainer's rank 0 does not receive weights"
        start, received, buckets = time.perf_counter(), 0, 0
        bucket = asyncio.ensure_future(asyncio.to_thread(self._receive_bucket))
        while True:
            metas, payload, last = await bucket
            received, buckets = received + payload.numel(), buckets + 1
            if not last:  # the next bucket arrives while this one's tensors are taken
                bucket = asyncio.ensure_future(asyncio.to_thread(self._receive_bucket))
            for meta in metas:
                yield meta, payload[meta.offset : meta.offset + meta.chunk_size]
            if last:
                break
        seconds = time.perf_counter() - start
        self.last = {"seconds": seconds, "megabytes": received / 2**20, "buckets": buckets}
        logger.info(
            "gloo checkpoint engine: received %.1f MB in %d bucket(s) in %.3f s", received / 2**20, buckets, seconds
        )

    def _receive_bucket(self) -> tuple[list[TensorMeta], torch.Tensor, bool]:
        header = torch.zeros(_HEADER, dtype=torch.int64)
        broadcast(self.group, header)
        described, total, last = (int(v) for v in header)
        payload = torch.empty(total, dtype=torch.uint8)
        broadcast(self.group, payload)
        metas = pickle.loads(payload[:described].numpy().tobytes())
        return metas, payload[_aligned(described) :], bool(last)
