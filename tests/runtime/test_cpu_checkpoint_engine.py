"""trainctl's gloo checkpoint engine (offpolicy=split on cpu): a state dict sent by the trainer's rank 0 arrives
whole, byte for byte, at every rollout process, through verl's own topology calls (prepare, build_topology,
init_process_group) as verl's CheckpointEngineManager makes them. Each side runs in a thread of its own, with its own
event loop, as each runs in a Ray actor of its own in a run (tests/launch/test_offpolicy.py runs it for real)."""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING

import pytest
import torch

if TYPE_CHECKING:
    from trainctl.runtime.cpu_checkpoint_engine import GlooCheckpointEngine

BUCKET = 4096  # bytes: small, so that the state below takes several buckets and one tensor several chunks


def _state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "embed.weight": torch.randn(40, 16, generator=g),  # 2560 bytes
        "odd.bias": torch.randn(3, generator=g, dtype=torch.bfloat16),  # 6 bytes: the next offset is unaligned
        "big.weight": torch.randn(3000, generator=g),  # 12000 bytes: split over buckets, merged on arrival
        "steps": torch.arange(5, dtype=torch.int64),
        "scale": torch.tensor(0.5),
    }


def _threads(*targets) -> None:
    errors = []

    def run(target):
        try:
            target()
        except BaseException as err:  # re-raised in the test's thread
            errors.append(err)

    threads = [threading.Thread(target=run, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads), "a side of the sync hung"


def _sync(trainers: list[GlooCheckpointEngine], rollouts: list[GlooCheckpointEngine], state: dict) -> list[dict]:
    """One weight sync as verl's manager drives it: prepare everywhere, the topology, the groups, send and receive."""
    metadata = [e.prepare() for e in trainers + rollouts]
    actor_kwargs, rollout_kwargs = type(trainers[0]).build_topology(len(trainers), len(rollouts), metadata)
    _threads(
        *(lambda e=e, i=i: e.init_process_group(**{k: v[i] for k, v in actor_kwargs.items()}) for i, e in
          enumerate(trainers)),
        *(lambda e=e, i=i: e.init_process_group(**{k: v[i] for k, v in rollout_kwargs.items()}) for i, e in
          enumerate(rollouts)),
    )  # fmt: skip
    got: list[dict] = [{} for _ in rollouts]

    def receive(i):
        async def take():
            async for name, tensor in rollouts[i].receive_weights(global_steps=1):
                got[i][name] = tensor.clone()

        asyncio.run(take())

    _threads(
        *(lambda e=e: asyncio.run(e.send_weights(iter(state.items()), global_steps=1)) for e in trainers),
        *(lambda i=i: receive(i) for i in range(len(rollouts))),
    )
    for e in trainers + rollouts:
        e.finalize()
    return got


@pytest.fixture(scope="module")
def engine() -> type[GlooCheckpointEngine]:
    """The engine, imported by the tests that use it rather than at collection: its module imports verl's checkpoint
    engines, and vLLM's distributed code through them, which every pytest worker would then import."""
    from trainctl.runtime.cpu_checkpoint_engine import GlooCheckpointEngine

    return GlooCheckpointEngine


def test_every_rollout_process_gets_the_whole_state_byte_for_byte(engine):
    trainers = [engine(BUCKET, is_master=True), engine(BUCKET)]
    rollouts = [engine(BUCKET), engine(BUCKET)]
    state = _state()
    for _ in range(2):  # the same engines sync again, in a group built anew
        for got in _sync(trainers, rollouts, state):
            assert list(got) == list(state)
            for name, tensor in state.items():
                assert got[name].dtype == tensor.dtype and torch.equal(got[name], tensor), name
        state = {k: v + 1 for k, v in state.items()}
    sent = trainers[0].last
    assert sent["buckets"] >= 4 and sent["megabytes"] * 2**20 >= sum(t.nbytes for t in state.values())
    assert rollouts[1].last["buckets"] == sent["buckets"]
    assert trainers[1].rank == -1  # a trainer rank besides 0 only walked the generator


def test_registered_with_verl(engine):
    from verl.checkpoint_engine.base import CheckpointEngineRegistry

    from trainctl.runtime.cpu_checkpoint_engine import BACKEND

    assert CheckpointEngineRegistry.get(BACKEND) is engine
    with pytest.raises(AssertionError, match="master"):
        engine.build_topology(1, 1, [{"master": None}, {"master": None}])
