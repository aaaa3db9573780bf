"""trainctl.runtime.step_speed: each sample's agent loop built without Hydra's config where that makes the same
object (a bare class target, as verl's @register writes), by Hydra otherwise."""

from __future__ import annotations

import asyncio
import functools

import hydra
import pytest
import torch

from trainctl.runtime import step_speed


class Loop:
    def __init__(self, trainer_config, server_manager, tokenizer=None, **kwargs):
        self.args = (trainer_config, server_manager, tokenizer, kwargs)


TARGET = {"_target_": f"{__name__}.Loop"}


def _hydra_must_not_run(*args, **kwargs):
    raise AssertionError("Hydra was called")


def test_a_bare_class_target_is_the_object_hydra_makes_without_hydra():
    """The same class and arguments, each the very object passed (Hydra keeps objects as they are: allow_objects)."""
    config, manager, extra = object(), object(), object()
    by_hydra = hydra.utils.instantiate(TARGET, trainer_config=config, server_manager=manager, tokenizer=None, x=extra)
    fast = step_speed.instantiate(
        _hydra_must_not_run, TARGET, trainer_config=config, server_manager=manager, tokenizer=None, x=extra
    )
    assert type(fast) is type(by_hydra) is Loop
    assert fast.args == by_hydra.args and all(a is b for a, b in zip(fast.args[:2], by_hydra.args[:2], strict=True))
    assert fast.args[3]["x"] is extra


@pytest.mark.parametrize(
    "config",
    [{**TARGET, "tokenizer": "from the config"}, {"_target_": f"{__name__}.TARGET.get"}],
    ids=["arguments of its own", "not a class"],
)
def test_anything_else_goes_to_hydra(config):
    calls = []

    def original(*args, **kwargs):
        calls.append((args, kwargs))
        return "hydra's"

    assert step_speed.instantiate(original, config, trainer_config=1) == "hydra's"
    assert calls == [((config,), {"trainer_config": 1})]


def test_the_module_stands_in_for_hydra_and_verl_still_registers_bare_targets():
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
    from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

    assert _agent_loop_registry["single_turn_agent"] == {
        "_target_": f"{SingleTurnAgentLoop.__module__}.{SingleTurnAgentLoop.__qualname__}"
    }
    stand_in = step_speed.wrap_hydra(hydra)
    assert stand_in.utils.get_class is hydra.utils.get_class and stand_in.main is hydra.main
    assert type(stand_in.utils.instantiate(TARGET, trainer_config=1, server_manager=2)) is Loop


def test_a_cpu_process_gets_the_stand_in_once_it_imports_the_agent_loop(plugin_probe):
    assert plugin_probe(VERL_PLATFORM="cpu")["agent_loop_hydra"] == "trainctl.runtime.step_speed"


def _micro_batch():
    """A micro-batch as verl's training passes get it from TransferQueue: tensors, jagged ones, per-sample non-tensor
    entries, and no device named."""
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    rows = [
        {
            "input_ids": torch.arange(5 + i),
            "response_mask": torch.ones(4, dtype=torch.long),
            "raw_prompt": [{"role": "user", "content": f"{i}+1="}],
            "reward_model": {"ground_truth": str(i + 1)},
            "uid": f"u{i}",
        }
        for i in range(4)
    ]
    return list_of_dict_to_tensordict(rows)


def test_a_micro_batch_on_the_cpu_is_verls_to_cpu_with_every_entry_kept():
    micro_batch = _micro_batch()
    by_verl = micro_batch.to("cpu")
    fast = step_speed.on_the_cpu(micro_batch)
    assert fast.device == by_verl.device and fast.batch_size == by_verl.batch_size
    assert set(fast.keys()) == set(by_verl.keys())
    for key, entry in micro_batch.items():
        assert fast.get(key) is entry  # kept, not rebuilt
    assert fast["response_mask"].equal(by_verl["response_mask"])
    assert fast["input_ids"].offsets().equal(by_verl["input_ids"].offsets())
    for key in ("raw_prompt", "reward_model", "uid"):
        assert fast[key] == by_verl[key]
    assert fast.to("cpu") is fast  # what verl's forward_step does with it: nothing


def test_what_is_not_a_plain_unplaced_tensordict_goes_to_verls_own_to():
    from tensordict import TensorDict

    placed = TensorDict({"a": torch.zeros(2)}, batch_size=[2], device="cpu")
    named = TensorDict({"a": torch.zeros(2)}, batch_size=[2], names=["sample"])
    lazy = TensorDict.lazy_stack([TensorDict({"a": torch.zeros(1)}, []), TensorDict({"a": torch.zeros(1)}, [])])
    for micro_batch in (placed, named, lazy, _micro_batch().lock_()):
        assert step_speed.on_the_cpu(micro_batch) is micro_batch


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_forward_step_gets_the_cpu_micro_batch_only_on_the_cpu_platform(monkeypatch, device):
    import verl.utils.device

    monkeypatch.setattr(verl.utils.device, "get_device_name", lambda: device)
    seen = []
    forward_step = step_speed.wrap_forward_step(lambda self, batch, loss, only: seen.append(batch) or "out")
    micro_batch = _micro_batch()
    assert forward_step(None, micro_batch, None, True) == "out"
    assert (seen[0] is micro_batch) == (device == "cuda")
    assert seen[0].device == (torch.device("cpu") if device == "cpu" else None)


def test_a_cpu_process_gets_the_engine_wrapper_once_it_imports_the_engine(plugin_probe):
    assert plugin_probe(VERL_PLATFORM="cpu")["forward_step"] == "step_speed.py"


def _batch_meta():
    """A training pass's metadata as verl's worker gets it: tensors, the sample's uid and metrics (not tensors), a
    non-tensor field no pass is known not to read, and a tensor under a name in UNREAD_BY_TRAINING."""
    from transfer_queue.metadata import BatchMeta

    schema = {
        "responses": {"dtype": torch.int64, "is_non_tensor": False},
        "uid": {"dtype": None, "is_non_tensor": True},
        "metrics": {"dtype": None, "is_non_tensor": True},
        "multi_modal_inputs": {"dtype": None, "is_non_tensor": True},
        "num_turns": {"dtype": torch.int64, "is_non_tensor": False},
    }
    return BatchMeta(global_indexes=[3, 4], partition_ids=["train", "train"], field_schema=schema, extra_info={"a": 1})


def test_a_training_pass_fetches_its_samples_without_the_fields_no_pass_reads():
    meta = _batch_meta()
    trimmed = step_speed.without_unread_fields(meta)
    assert trimmed.field_names == ["multi_modal_inputs", "num_turns", "responses"]
    assert trimmed.global_indexes == [3, 4] and trimmed.extra_info == {"a": 1}
    assert step_speed.without_unread_fields(trimmed) is trimmed  # nothing left to drop: the very metadata
    assert step_speed.without_unread_fields("a TensorDict") == "a TensorDict"


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_training_passes_fetch_less_only_on_the_cpu_platform_and_keep_verls_dispatch(monkeypatch, device):
    import verl.utils.device
    from verl.single_controller.base.decorator import MAGIC_ATTR
    from verl.workers.engine_workers import ActorRolloutRefWorker

    from trainctl.runtime import verl_patches

    monkeypatch.setattr(verl.utils.device, "get_device_name", lambda: device)
    update = verl_patches.original("verl.workers.engine_workers", "ActorRolloutRefWorker.update_actor")
    update = update or ActorRolloutRefWorker.update_actor
    seen = []
    passes = step_speed.wrap_training_pass(functools.wraps(update)(lambda self, data: seen.append(data) or "out"))
    assert getattr(passes, MAGIC_ATTR) == getattr(update, MAGIC_ATTR)  # the worker group binds it as verl's
    assert passes(None, _batch_meta()) == "out"
    assert seen[0].field_names == (
        ["multi_modal_inputs", "num_turns", "responses"] if device == "cpu" else _batch_meta().field_names
    )


def test_a_cpu_process_gets_the_training_passes_once_it_imports_the_workers(plugin_probe):
    assert plugin_probe(VERL_PLATFORM="cpu")["training_passes"] == ["step_speed.py"]


def _reward_config(source="register", reward_model=False):
    from omegaconf import OmegaConf

    reward = {"reward_model": {"enable": reward_model}, "reward_manager": {"source": source}}
    return OmegaConf.create({"reward": reward})


@pytest.mark.parametrize(
    ("device", "config", "in_process"),
    [
        ("cpu", _reward_config(), True),
        ("cuda", _reward_config(), False),
        ("cpu", _reward_config(source="importlib"), False),  # reward=model on hf, reward=judge: trainctl's managers
        ("cpu", _reward_config(reward_model=True), False),
    ],
    ids=["rule-based on the cpu", "on a gpu", "trainctl's manager", "a reward model"],
)
def test_the_agent_loop_scores_in_its_process_only_rule_based_rewards_on_the_cpu(
    monkeypatch, device, config, in_process
):
    import verl.utils.device

    monkeypatch.setattr(verl.utils.device, "get_device_name", lambda: device)

    class Worker:
        def __init__(self, config, llm_client, teacher_client=None, reward_loop_worker_handles=None):
            self.reward_loop_worker_handles = reward_loop_worker_handles

    Worker.__init__ = step_speed.wrap_agent_loop_worker_init(Worker.__init__)
    handles = ["the reward worker's actor handle"]
    worker = Worker(config, None, reward_loop_worker_handles=handles)
    if in_process:
        assert [type(h) for h in worker.reward_loop_worker_handles] == [step_speed.InProcessRewardWorker]
    else:
        assert worker.reward_loop_worker_handles is handles
    # a run whose reward the trainer computes after the rollout (a reward model on the training's devices) has none
    assert Worker(config, None).reward_loop_worker_handles is None


def test_without_a_reward_model_verls_compute_score_is_its_managers_run_single():
    """What InProcessRewardWorker skips to: if verl's compute_score changes, review it."""
    import hashlib
    import inspect

    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    source = inspect.getsource(RewardLoopWorker.compute_score)
    assert hashlib.sha256(source.encode()).hexdigest() == (
        "163c1ca0102cfb2dc8e02cf4dc994feb6a154bb22a019d01736fce5607dc7649"
    ), source
    assert source.count("return await self.reward_manager.run_single(data)") == 2


def _sample(tokenizer, prompt: str, response: str, ground_truth: str):
    """One finished sample as verl's agent loop sends it to a reward worker (AgentLoopWorker._compute_score)."""
    import numpy as np
    from tensordict import TensorDict
    from verl import DataProto

    prompts = torch.tensor([tokenizer.encode(prompt)])
    responses = torch.tensor([tokenizer.encode(response)])
    input_ids = torch.cat([prompts, responses], dim=1)
    batch = TensorDict(
        {
            "prompts": prompts,
            "responses": responses,
            "input_ids": input_ids,
            "attention_mask": torch.ones_like(input_ids),
            "position_ids": torch.arange(input_ids.shape[1]).unsqueeze(0),
        },
        batch_size=1,
    )
    kwargs = {"data_source": "arith", "reward_model": {"ground_truth": ground_truth}, "extra_info": {}}
    non_tensor = {k: np.array([v]) for k, v in kwargs.items()}
    non_tensor["__num_turns__"] = np.array([2])
    non_tensor["tool_extra_fields"] = np.array([{}], dtype=object)
    return DataProto(batch=batch, non_tensor_batch=non_tensor)


def test_a_sample_scored_in_process_gets_the_score_verls_reward_worker_gives(monkeypatch, tiny_model, arith_data):
    """The tiny recipe's reward (trainctl's arith scorer through verl's custom_reward_function), scored by the
    stand-in the agent loop awaits and by verl's RewardLoopWorker as its Ray actor runs it: the same answers."""
    import asyncio

    import verl.utils.device
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    monkeypatch.setattr(verl.utils.device, "get_device_name", lambda: "cpu")

    from trainctl.plan import make_plan

    config = make_plan(["recipe=grpo-arith-tiny-cpu"], native=False).built.cfg
    assert step_speed.scores_in_process(config)  # the tiny recipe's run scores this way on the cpu platform
    handle = step_speed.InProcessRewardWorker(config)

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    # the right answer, and a wrong one in the answer's form
    samples = [_sample(tokenizer, "12+30=", f"#### {answer}", "42") for answer in ("42", "41")]

    async def scored():  # as in the agent-loop worker and in the reward worker: one event loop for the run's samples
        by_verl = RewardLoopWorker(config)
        return [(await handle.compute_score.remote(d), await by_verl.compute_score(d)) for d in samples]

    results = asyncio.run(scored())
    assert [in_process for in_process, _ in results] == [by_verl for _, by_verl in results]
    assert [in_process["reward_score"] for in_process, _ in results] == [1.0, 0.75]


def test_a_cpu_process_scores_in_process_once_it_imports_the_agent_loop(plugin_probe):
    assert plugin_probe(VERL_PLATFORM="cpu")["agent_loop_worker_init"] == "step_speed.py"


class _Counting:
    """psutil, counting the calls of cpu_count."""

    def __init__(self):
        import psutil

        self._psutil, self.calls = psutil, 0

    def cpu_count(self, logical=True):
        self.calls += 1
        return self._psutil.cpu_count(logical=logical)

    def __getattr__(self, name):
        return getattr(self._psutil, name)


def test_transfer_queues_core_count_is_psutils_read_once():
    import psutil

    counting = _Counting()
    seen = step_speed.wrap_psutil(counting)
    assert [seen.cpu_count(logical=False) for _ in range(3)] == [psutil.cpu_count(logical=False)] * 3
    assert counting.calls == 1
    assert seen.cpu_count() == psutil.cpu_count() and seen.virtual_memory().total == psutil.virtual_memory().total


def test_transfer_queues_thread_limit_is_what_it_clamps_to_without_its_warning(monkeypatch, caplog):
    """TransferQueue's limiter, as its client and storage unit call it, with TQ_NUM_THREADS as set (8) and as
    patched: the same threads inside, and a warning only with 8 on a machine with fewer physical cores."""
    import logging

    import psutil
    import verl.utils.device

    assert step_speed.wrap_tq_num_threads(8) == 8  # off the cpu platform: as set
    monkeypatch.setattr(verl.utils.device, "get_device_name", lambda: "cpu")
    from transfer_queue.utils.common import limit_pytorch_auto_parallel_threads

    cores = psutil.cpu_count(logical=False)
    inside = {}
    for setting in (8, step_speed.wrap_tq_num_threads(8)):
        caplog.clear()
        with (
            caplog.at_level(logging.WARNING, logger="transfer_queue.utils.common"),
            limit_pytorch_auto_parallel_threads(target_num_threads=setting),
        ):
            inside[setting] = torch.get_num_threads()
        warned = any("should not exceed" in r.getMessage() for r in caplog.records)
        assert warned == (setting > cores), (setting, cores)
    assert set(inside.values()) == {min(8, cores)}


def test_a_cpu_process_gets_transfer_queues_thread_limit_once_it_imports_it(plugin_probe):
    import psutil

    facts = plugin_probe(VERL_PLATFORM="cpu")
    cores = min(8, psutil.cpu_count(logical=False))
    assert facts["tq_num_threads"] == [cores, cores] and facts["tq_psutil"] == "CoreCount"
    assert plugin_probe()["tq_num_threads"] == [8, 8]  # off the cpu platform, the patch leaves it as set


@pytest.mark.parametrize("shape", [(37, 512), (3, 13, 64)], ids=["packed", "batched"])
@pytest.mark.parametrize("chunk_elements", [1 << 22, 5 * 64], ids=["one-chunk", "many-chunks"])
def test_log_probs_in_chunks_equal_verls_bit_for_bit_with_their_gradients(shape, chunk_elements):
    import torch
    from verl.utils.torch_functional import logprobs_from_logits_v2

    torch.manual_seed(0)
    logits = torch.randn(*shape, dtype=torch.float32) * 4
    labels = torch.randint(0, shape[-1], shape[:-1])
    weights = torch.randn(shape[:-1])
    results = []
    for fn in (
        logprobs_from_logits_v2,
        functools.partial(step_speed.logprobs_in_chunks, chunk_elements=chunk_elements),
    ):
        x = logits.clone().requires_grad_(True)
        out = fn(x, labels)
        (out * weights).sum().backward()
        results.append((out.detach(), x.grad))
    (want, want_grad), (got, got_grad) = results
    assert got.shape == want.shape == shape[:-1]
    assert torch.equal(got, want) and torch.equal(got_grad, want_grad)


def test_the_log_probs_patch_runs_verls_own_code_off_the_cpu_platform_and_for_bf16(monkeypatch):
    import torch

    calls = []
    patched = step_speed.wrap_logprobs_from_logits(lambda logits, labels, inplace_backward=True: calls.append("verl"))
    monkeypatch.setattr(step_speed, "logprobs_in_chunks", lambda logits, labels: calls.append("chunks"))
    logits, labels = torch.zeros(4, 8), torch.zeros(4, dtype=torch.long)
    for on_cpu, dtype in ((True, torch.float32), (True, torch.bfloat16), (False, torch.float32)):
        monkeypatch.setattr(step_speed, "_on_cpu", lambda on_cpu=on_cpu: on_cpu)
        patched(logits.to(dtype), labels)
    assert calls == ["chunks", "verl", "verl"]


class _Recording:
    """TransferQueue's put as the agent loop's puts reach it (what each call carried), each call held until the test
    lets it return; anything else is TransferQueue's (test_coalesced_puts_read_back_as_the_puts_one_by_one runs the
    real one)."""

    def __init__(self):
        self.calls: list[dict] = []
        self.gate: asyncio.Event | None = None
        self.fail: Exception | None = None

    async def async_kv_batch_put(self, **kwargs):
        self.calls.append(kwargs)
        await self.gate.wait()
        if self.fail:
            raise self.fail
        return f"stored {len(self.calls)}"


def _row(key: str, length: int) -> dict:
    return {"responses": torch.arange(length), "reward_score": float(length), "uid": key}


async def _settle():
    for _ in range(5):
        await asyncio.sleep(0)


@pytest.fixture
def coalesced(monkeypatch):
    """CoalescedPuts over a recording TransferQueue, and the row builder as the agent loop's module sees it."""
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    monkeypatch.setattr(step_speed, "_on_cpu", lambda: True)
    recording = _Recording()
    puts = step_speed.wrap_transfer_queue(recording)
    return puts, step_speed.wrap_list_of_dict_to_tensordict(list_of_dict_to_tensordict), recording


def test_puts_made_while_one_is_in_flight_go_as_one_of_each_kind_and_each_returns_once_stored(coalesced):
    """The first put goes at once; the samples and statuses put meanwhile go as one put of rows (in the order they
    came, the columns verl would build for them together) and one of tags; each caller returns when its put is back."""
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    puts, rows, recording = coalesced

    async def scenario():
        recording.gate = asyncio.Event()
        first = asyncio.ensure_future(
            puts.async_kv_batch_put(keys=["a_0_0"], partition_id="train", fields=rows([_row("a", 3)]), tags=[{"n": 0}])
        )
        await _settle()
        later = [
            asyncio.ensure_future(
                puts.async_kv_batch_put(
                    keys=[f"{u}_0_0"], partition_id="train", fields=rows([_row(u, n)]), tags=[{"n": n}]
                )
            )
            for u, n in (("b", 5), ("c", 2), ("d", 5))
        ] + [
            asyncio.ensure_future(puts.async_kv_put(key=u, partition_id="train", tag={"status": "running"}))
            for u in "ef"
        ]
        await _settle()
        assert len(recording.calls) == 1 and not any(f.done() for f in (first, *later))
        recording.gate.set()
        return await first, await asyncio.gather(*later)

    first, later = asyncio.run(scenario())
    assert first == "stored 1" and later == ["stored 2"] * 3 + ["stored 3"] * 2
    _, samples, statuses = recording.calls
    assert samples["keys"] == ["b_0_0", "c_0_0", "d_0_0"] and samples["tags"] == [{"n": 5}, {"n": 2}, {"n": 5}]
    want = list_of_dict_to_tensordict([_row("b", 5), _row("c", 2), _row("d", 5)])
    got = samples["fields"]
    assert got["responses"].is_nested and [t.tolist() for t in got["responses"].unbind()] == [
        t.tolist() for t in want["responses"].unbind()
    ]
    assert list(got["reward_score"]) == [5.0, 2.0, 5.0] and list(got["uid"]) == ["b", "c", "d"]
    assert statuses == {
        "keys": ["e", "f"],
        "partition_id": "train",
        "fields": None,
        "tags": [{"status": "running"}] * 2,
    }


def test_puts_go_apart_across_partitions_fields_and_a_key_put_twice(coalesced):
    puts, rows, recording = coalesced

    async def scenario():
        recording.gate = asyncio.Event()
        blocker = asyncio.ensure_future(puts.async_kv_put(key="z", partition_id="train", tag={"s": 0}))
        await _settle()
        recording.gate.set()
        await asyncio.gather(
            blocker,
            puts.async_kv_batch_put(keys=["a"], partition_id="train", fields=rows([_row("a", 1)]), tags=[{}]),
            puts.async_kv_batch_put(keys=["b"], partition_id="val", fields=rows([_row("b", 1)]), tags=[{}]),
            puts.async_kv_batch_put(keys=["c"], partition_id="train", fields=rows([{"other": 1}]), tags=[{}]),
            puts.async_kv_put(key="u", partition_id="train", tag={"status": "running"}),
            puts.async_kv_put(key="u", partition_id="train", tag={"status": "finished"}),
        )

    asyncio.run(scenario())
    got = [(c["partition_id"], c["keys"], c["tags"]) for c in recording.calls]
    assert got == [
        ("train", ["z"], [{"s": 0}]),
        ("train", ["a"], [{}]),
        ("val", ["b"], [{}]),
        ("train", ["c"], [{}]),
        ("train", ["u"], [{"status": "running"}]),
        ("train", ["u"], [{"status": "finished"}]),
    ]


def test_a_failed_put_fails_each_put_in_it_and_later_puts_go_on(coalesced):
    puts, _, recording = coalesced

    async def scenario():
        recording.gate = asyncio.Event()
        recording.gate.set()
        recording.fail = RuntimeError("storage unit gone")
        failed = await asyncio.gather(
            *(puts.async_kv_put(key=k, partition_id="train", tag={}) for k in "ab"), return_exceptions=True
        )
        recording.fail = None
        return failed, await puts.async_kv_put(key="c", partition_id="train", tag={})

    failed, after = asyncio.run(scenario())
    assert [str(e) for e in failed] == ["storage unit gone"] * 2 and after.startswith("stored")


def test_rows_that_cannot_share_columns_are_put_each_on_its_own(coalesced):
    """A tensor ragged past its first dimension (multimodal position ids: 3 x length) cannot be nested with another
    sample's: each put goes as verl would have made it, and one verl could not have built fails alone."""
    puts, rows, recording = coalesced
    ragged = [{"position_ids": torch.zeros(3, n, dtype=torch.long)} for n in (4, 6)]

    async def scenario():
        recording.gate = asyncio.Event()
        blocker = asyncio.ensure_future(puts.async_kv_put(key="z", partition_id="train", tag={}))
        await _settle()
        recording.gate.set()
        return await asyncio.gather(
            blocker,
            *(
                puts.async_kv_batch_put(keys=[f"k{i}"], partition_id="train", fields=rows([row]), tags=[{}])
                for i, row in enumerate(ragged)
            ),
            puts.async_kv_batch_put(
                keys=["bad"], partition_id="train", fields=rows([{"position_ids": 1}, {}]), tags=[{}, {}]
            ),
            return_exceptions=True,
        )

    *stored, failed = asyncio.run(scenario())
    assert stored == ["stored 1", "stored 2", "stored 3"] and isinstance(failed, KeyError)
    assert [c["keys"] for c in recording.calls] == [["z"], ["k0"], ["k1"]]
    assert recording.calls[2]["fields"]["position_ids"].shape == (1, 3, 6)


def test_puts_waiting_on_a_cancelled_flush_are_cancelled_not_left_waiting(coalesced):
    puts, _, recording = coalesced

    async def scenario():
        recording.gate = asyncio.Event()
        waiting = [asyncio.ensure_future(puts.async_kv_put(key=k, partition_id="train", tag={})) for k in "abc"]
        await _settle()
        puts._flushing.cancel()  # the worker's event loop closing
        return await asyncio.gather(*waiting, return_exceptions=True)

    assert all(isinstance(r, asyncio.CancelledError) for r in asyncio.run(scenario()))


def test_what_coalesced_puts_do_not_take_goes_to_transfer_queue_as_it_came(coalesced):
    """A TensorDict built elsewhere, a put with a data parser, a put of data under one key: TransferQueue's own."""
    from tensordict import TensorDict

    puts, rows, recording = coalesced
    seen = []

    async def kv_put(**kwargs):
        seen.append(kwargs)

    recording.async_kv_put = kv_put
    built = TensorDict({"x": torch.zeros(1, 2)}, batch_size=[1])

    async def scenario():
        recording.gate = asyncio.Event()
        recording.gate.set()
        await puts.async_kv_batch_put(keys=["a"], partition_id="train", fields=built, tags=[{}])
        await puts.async_kv_batch_put(keys=["b"], partition_id="train", fields=rows([{"x": 1}]), data_parser=len)
        await puts.async_kv_put(key="c", partition_id="train", fields={"x": torch.zeros(2)})

    asyncio.run(scenario())
    assert recording.calls[0]["fields"] is built and type(recording.calls[1]["fields"]).__name__ == "TensorDict"
    assert recording.calls[1]["data_parser"] is len and seen[0]["key"] == "c"


def test_off_the_cpu_platform_the_agent_loop_puts_through_transfer_queue_itself(monkeypatch):
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    monkeypatch.setattr(step_speed, "_on_cpu", lambda: False)
    module = object()
    assert step_speed.wrap_transfer_queue(module) is module
    rows = step_speed.wrap_list_of_dict_to_tensordict(list_of_dict_to_tensordict)([{"x": 1}])
    assert type(rows).__name__ == "TensorDict"


def test_a_cpu_process_puts_through_coalesced_puts_once_it_imports_the_tq_agent_loop(plugin_probe):
    assert plugin_probe(VERL_PLATFORM="cpu")["agent_loop_tq"] == ["CoalescedPuts", "Rows"]
    assert plugin_probe()["agent_loop_tq"] == ["module", "TensorDict"]


def test_coalesced_puts_are_sent_to_the_agent_loops_process_as_themselves():
    """Ray sends verl's agent-loop worker class by value, with the module globals its methods use: the stand-in
    arrives as a stand-in (made there), not as an object that fails to unpickle."""
    import pickle

    import transfer_queue

    stand_in = step_speed.CoalescedPuts(transfer_queue, None)
    assert isinstance(pickle.loads(pickle.dumps(stand_in)), (step_speed.CoalescedPuts, type(transfer_queue)))


@pytest.mark.slow
def test_coalesced_puts_read_back_as_the_puts_one_by_one():
    """A real TransferQueue (tests/runtime/tq_puts_probe.py: a local Ray, its controller and storage unit): 24
    samples and 6 statuses put one by one and through CoalescedPuts read back the same, field by field and tag by
    tag, from far fewer puts."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    probe = Path(__file__).with_name("tq_puts_probe.py")
    out = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    facts = json.loads(out.stdout.strip().splitlines()[-1])
    assert facts["field_names"][0] == facts["field_names"][1] and all(facts["fields"].values()), facts
    assert facts["tags_equal"] and facts["tags"] == 30
    assert facts["puts"]["a"] == 30 and facts["puts"]["b"] <= 10, facts["puts"]
    # a training pass's fetch: the tensors as they were stored, without the sample's uid, session and extra fields
    assert facts["trimmed_fields"] == ["prompts", "response_mask", "responses", "reward_score", "rollout_log_probs"]
    assert facts["trimmed_equal"]
