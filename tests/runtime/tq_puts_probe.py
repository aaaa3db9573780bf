"""Run by tests/runtime/test_step_speed.py in a process of its own (a local Ray, TransferQueue's controller and
storage unit): the same samples put into one partition one by one, as verl's TQ agent loop puts them, and into another
through CoalescedPuts, concurrently; then read back by key. Prints one JSON line: how each field and tag read back
compares, how many puts each way made, and what a training pass on the cpu platform fetches of them."""

import asyncio
import json
import random

import ray
import torch
import verl.utils.device
from verl.utils.tensordict_utils import list_of_dict_to_tensordict

from trainctl.runtime import step_speed

verl.utils.device.get_device_name = lambda: "cpu"  # what trainctl's CPU platform answers
ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
import transfer_queue as tq  # noqa: E402

tq.init()
rng = random.Random(0)


def row(uid: str, session: int) -> dict:
    """A sample's fields as verl's agent loop puts them (lengths vary: stacked alone, nested together)."""
    prompt, response = rng.randint(5, 9), rng.randint(1, 6)
    return {
        "prompts": torch.randint(0, 500, (prompt,)),
        "responses": torch.randint(0, 500, (response,)),
        "response_mask": torch.ones(response, dtype=torch.int64),
        "rollout_log_probs": torch.randn(response),
        "reward_score": rng.random(),
        "extra_fields": {"reward_extra_info": {"acc": rng.random()}, "min_global_steps": 3},
        "uid": uid,
        "session_id": session,
    }


samples = [(f"u{i}_{s}_0", row(f"u{i}", s)) for i in range(6) for s in range(4)]
statuses = [(f"u{i}", {"status": "finished"}) for i in range(6)]
calls = {"a": 0, "b": 0}
put = tq.async_kv_batch_put


async def counted(**kwargs):
    calls[kwargs["partition_id"]] += 1
    return await put(**kwargs)


tq.async_kv_batch_put = counted


async def one_by_one():
    for key, fields in samples:
        tags = [{"status": "success", "key": key}]
        await tq.async_kv_batch_put(
            keys=[key], partition_id="a", fields=list_of_dict_to_tensordict([fields]), tags=tags
        )
    for key, tag in statuses:
        await tq.async_kv_batch_put(keys=[key], partition_id="a", tags=[tag])


async def coalesced():
    puts = step_speed.wrap_transfer_queue(tq)
    rows = step_speed.wrap_list_of_dict_to_tensordict(list_of_dict_to_tensordict)

    async def sample(key, fields):
        await asyncio.sleep(rng.random() * 0.02)
        tags = [{"status": "success", "key": key}]
        await puts.async_kv_batch_put(keys=[key], partition_id="b", fields=rows([fields]), tags=tags)

    await asyncio.gather(*(sample(key, fields) for key, fields in samples))
    await asyncio.gather(*(puts.async_kv_put(key=key, partition_id="b", tag=tag) for key, tag in statuses))


asyncio.run(one_by_one())
asyncio.run(coalesced())
keys = [key for key, _ in samples]
rng.shuffle(keys)
a, b = tq.kv_batch_get(keys=keys, partition_id="a"), tq.kv_batch_get(keys=keys, partition_id="b")


def values(field):
    if isinstance(field, torch.Tensor):
        return [t.tolist() for t in (field.unbind() if field.is_nested else field)], str(field.dtype), field.is_nested
    return list(field), type(field).__name__


fields = {name: [values(a[name]), values(b[name])] for name in a.keys()}  # noqa: SIM118 - a TensorDict iterates over its rows
# what a training pass fetches on the cpu platform: the metadata verl's worker gets, without the fields no pass reads
client = tq.get_client()
meta = client.kv_retrieve_meta(keys=keys, partition_id="b", create=False)
whole, trimmed = client.get_data(meta), client.get_data(step_speed.without_unread_fields(meta))
print(json.dumps({
    "fields": {name: pair[0] == pair[1] for name, pair in fields.items()},
    "field_names": [sorted(a.keys()), sorted(b.keys())],
    "tags_equal": tq.kv_list("a")["a"] == tq.kv_list("b")["b"],
    "tags": len(tq.kv_list("b")["b"]),
    "puts": calls,
    "trimmed_fields": sorted(trimmed.keys()),
    "trimmed_equal": all(values(trimmed[name]) == values(whole[name]) for name in trimmed.keys()),  # noqa: SIM118
}))  # fmt: skip
ray.shutdown()
