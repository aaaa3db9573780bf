"""trainctl.runtime.step_speed: each sample's agent loop built without Hydra's config where that makes the same
object (a bare class target, as verl's @register writes), by Hydra otherwise."""

from __future__ import annotations

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
