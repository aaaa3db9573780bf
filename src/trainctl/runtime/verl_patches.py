"""The patches trainctl applies to verl where verl offers no hook. All of them, here, guarded to verl 0.9.1.

Five sets, each replacing module attributes with wrappers:
  - PATCHES (apply()): behave exactly like the original unless the process runs on trainctl's CPU platform;
  - METRIC_PATCHES (apply_metrics()): the trainer's metrics, with the figures trainctl adds to the training log
    (trainctl.runtime.reward_metrics, .tool_metrics and .env_metrics provide them) when trainctl launched the run
    with them; one wrapper per verl function, whichever sets are on;
  - TRAJECTORY_PATCHES (apply_trajectories()): the turns of each trajectory in the rollout dumps, for runs with
    tools (trainctl.runtime.trajectories provides the wrappers);
  - VLLM_CPU_PATCHES (apply_vllm_cpu()): vLLM's CPU build inside the rollout's vLLM workers (trainctl.runtime.vllm_cpu
    applies them there, where vLLM is loaded anyway; no other process imports vLLM for them);
  - VLLM_CPU_START_PATCHES (apply_vllm_cpu_start()): vLLM's CPU build as any of its engines starts (trainctl's
    vLLM plugin, trainctl.runtime.vllm_plugin, applies them in each vLLM process on the CPU platform).
tests/runtime/test_verl_patches.py pins the source of every patched function, so a verl upgrade that changes them
fails loudly instead of silently running something else. What verl registers through its own registries (the CPU
platform, its engines, the hf rollout: trainctl.runtime.verl_cpu) is not patched and is not here.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import logging
import os
from datetime import timedelta

logger = logging.getLogger(__name__)

VERL_VERSION = "0.9.1"

# module, function: why
PATCHES = {
    ("verl.utils.distributed", "initialize_global_process_group"): (
        "builds the backend string 'cpu:gloo,<device>:<backend>', which on the cpu device names cpu twice"
    ),
    ("verl.utils.distributed", "initialize_global_process_group_ray"): "the same, for processes Ray starts",
    ("verl.single_controller.ray.base", "ResourcePoolManager._check_resource_available"): (
        "counts only GPU/NPU resources ('Total available GPUs 0 is less than total desired GPUs 1'); "
        "on the cpu platform the pools are placed on Ray's CPU resource, which is what it should count"
    ),
    ("verl.single_controller.ray.base", "RayResourcePool.get_placement_groups"): (
        "leaves where each node's placement group goes to Ray: on GPUs a node's group takes all of its GPUs, so the "
        "groups land on different nodes; on CPUs several groups fit one node, and a run across nodes "
        "(hardware.nnodes) would not be. Each node group is pinned to a node of its own (Ray's node-id label), among "
        "the CPUs left once TransferQueue's actors hold theirs, as the plan's capacity check placed them; "
        "offpolicy=split's rollout pool on nodes apart from the training's (trainctl.runtime.split_placement)"
    ),
    # TransferQueue 0.1.11, which verl 0.9.1 creates before the training's placement groups
    ("transfer_queue.interface", "TransferQueueController"): (
        "TransferQueue creates its controller (one CPU) wherever Ray puts it: on a cluster of CPU nodes it filled the "
        "node a training group then waited for forever. On the cpu platform it goes to the head, where the capacity "
        "check counts it (trainctl.launchers.capacity.beside)"
    ),
    ("transfer_queue.storage.bootstrap.simple_storage_bootstrap", "get_node_round_robin_scheduling_strategies"): (
        "TransferQueue puts its storage units (one CPU each) on the nodes in the order of their ids, whatever a "
        "training group needs there: on the cpu platform they go to the head, beside the controller"
    ),
    # TransferQueue's thread limit around every put and get (trainctl.runtime.step_speed)
    ("transfer_queue.utils.common", "psutil"): "asked for the physical cores each time: a sysfs glob",
    ("transfer_queue.client", "TQ_NUM_THREADS"): "8 unless set: above the physical cores, each put and get warns",
    ("transfer_queue.storage.simple_storage", "TQ_NUM_THREADS"): "the same, in the storage unit",
    ("verl.workers.engine.fsdp.transformer_impl", "CPUOffloadPolicy"): (
        "the reference model is always offloaded with CPUOffloadPolicy(pin_memory=True); pinning needs an accelerator"
    ),
    ("verl.utils.model", "load_valuehead_model"): (
        "the critic is loaded with attn_implementation='flash_attention_2' hard-coded; flash-attn needs a GPU, and "
        "on a GPU it needs the flash-attn package (no wheel on PyPI: often not installed)"
    ),
    ("verl.trainer.ppo.v1.replay_buffer", "ReplayBuffer.__init__"): (
        "the replay buffer checks for finished rollouts every poll_interval=2.0 s, which no config key sets "
        "(trainer_base._build_replay_buffer passes none); a CPU rollout of a small model takes well under that, "
        "so every step slept up to 2 s waiting for the next poll"
    ),
    ("verl.workers.engine.fsdp.transformer_impl", "logprobs_from_logits"): (
        "without flash-attn's cross-entropy (always, on a CPU) it falls back to logprobs_from_logits_v2, which "
        "runs one logsumexp per token in a Python loop over the packed (tokens, vocab) logits: 23 ms forward and "
        "backward for 528 tokens of the tiny model, against 1.7 ms in chunks; the tiny recipe's GRPO step does it "
        "12 times (old log-probs, reference, update: 4 micro-batches each)"
    ),
    # verl's TQ agent-loop worker puts each sample (and each prompt's status) into TransferQueue on its own
    ("verl.trainer.ppo.v1.agent_loop_tq", "tq"): (
        "one put a sample and two a prompt, each a round trip to TransferQueue's controller and storage unit while "
        "the step waits (trainctl.runtime.step_speed)"
    ),
    ("verl.trainer.ppo.v1.agent_loop_tq", "list_of_dict_to_tensordict"): "a sample's rows, for the puts above",
    ("verl.experimental.agent_loop.agent_loop", "hydra"): (
        "each sample's agent loop is built by Hydra from a bare class target (trainctl.runtime.step_speed)"
    ),
    ("verl.workers.engine.fsdp.transformer_impl", "FSDPEngineWithLMHead.forward_step"): (
        "moves each micro-batch to the device, which on a CPU moves no tensor but rebuilds every non-tensor entry "
        "(trainctl.runtime.step_speed)"
    ),
    # each training pass fetches every field of its samples (trainctl.runtime.step_speed)
    ("verl.workers.engine_workers", "ActorRolloutRefWorker.compute_ref_log_prob"): (
        "fetches the fields the reward and metrics read, which no pass reads, one tensorclass per sample and field"
    ),
    ("verl.workers.engine_workers", "ActorRolloutRefWorker.compute_log_prob"): "the same",
    ("verl.workers.engine_workers", "ActorRolloutRefWorker.update_actor"): "the same",
    ("verl.workers.engine_workers", "TrainingWorker.infer_batch"): "the same (the critic's values)",
    ("verl.workers.engine_workers", "TrainingWorker.train_mini_batch"): "the same (the critic's update)",
    ("verl.experimental.agent_loop.agent_loop", "AgentLoopWorker.__init__"): (
        "the agent loop scores each sample with a Ray call to a reward worker, which on a CPU costs more than a "
        "rule-based scorer's work (trainctl.runtime.step_speed)"
    ),
}

TRAINER = "verl.trainer.ppo.v1.trainer_base"
# the legacy trainer (trainer.use_v1=false: remax runs on it)
LEGACY_TRAINER = "verl.trainer.ppo.ray_trainer"

# verl has no hook for adding to the training log: module, function: what it lacks, and what trainctl adds
METRIC_PATCHES = {
    (TRAINER, "compute_data_metrics"): (
        "logs the scores' mean, max and min (critic/score/*) but no spread: reward/<kind>/mean and /std are added"
    ),
    (LEGACY_TRAINER, "compute_data_metrics"): "the same function, imported by name: the same figures are added",
    (TRAINER, "PPOTrainer._compute_metrics"): (
        "logs what reward managers return beside the score only for validation, and never how many tool calls were "
        "made or failed: the judge's figures (reward=judge) and the step's tool calls (tools=...) are added"
    ),
    (TRAINER, "PPOTrainer._validate"): (
        "the tool calls validation makes are reported with the validation metrics (val-tool/*), not the next step's"
    ),
    (TRAINER, "PPOTrainer.step"): (
        "has no hook between a step's rewards and its checkpoint: an environment's per-task rewards are read there, "
        "and its curriculum moves the tasks' levels before the checkpoint saves them"
    ),
}

LOOP = "verl.experimental.agent_loop.tool_agent_loop"

# verl dumps trajectories as flat text: module, function: what it drops, and what trainctl keeps
TRAJECTORY_PATCHES = {
    (LOOP, "ToolAgentLoop._handle_pending_state"): (
        "the loop's state (AgentData: the messages, tool calls and results) is local to run(): it is kept on the loop"
    ),
    (LOOP, "ToolAgentLoop.run"): "when a trajectory ends, its turns are written beside the run's rollout dumps",
    (TRAINER, "PPOTrainer._write_generations"): (
        "dumps the prompt and response as flat strings: each line gets the trajectory's turns (roles, tool calls)"
    ),
}

# vLLM's CPU build under verl's weight sync (trainctl.runtime.vllm_cpu's worker extension): module, function: why
VLLM_CPU_PATCHES = {
    ("vllm.model_executor.layers.utils", "dispatch_cpu_unquantized_gemm"): (
        "after loading, a linear layer's weight is packed into a oneDNN handle and the parameter replaced by an empty "
        "one without its weight_loader (remove_weight=True): verl's in-place weight sync then fails ('Parameter' "
        "object has no attribute 'weight_loader'). The parameter is kept (remove_weight=False, as vLLM already does "
        "for embeddings), so each sync loads into it and verl's process_weights_after_loading packs it anew"
    ),
}

# vLLM's CPU build as an engine starts (eval, chat, model serve, the rollout's servers): module, function: why
VLLM_CPU_START_PATCHES = {
    ("vllm.model_executor.models.registry", "_run_in_subprocess"): (
        "vLLM inspects the model's class in a fresh Python (12 s of CPU on 2 cores: it imports torch and vLLM anew) so "
        "that the engine's process does not initialize CUDA. A CPU has no CUDA to keep uninitialized: the class is "
        "inspected in the process (~1.6 s). The result is cached under VLLM_CACHE_ROOT either way"
    ),
    # the CPU sampler's two compiled functions, each compiled on an engine's first sampled token (~10 s of CPU)
    ("vllm.v1.sample.ops.topk_topp_sampler", "compiled_random_sample"): (
        "the random draw: eager for a vocabulary under trainctl.runtime.vllm_cpu.EAGER_SAMPLER_VOCAB tokens, where its "
        "compile takes longer than every draw of a run"
    ),
    ("vllm.v1.sample.sampler", "batched_count_greater_than"): (
        "each sampled token's rank among the logprobs (verl asks for logprobs): eager for the same vocabularies"
    ),
}

# seconds between the replay buffer's checks for finished rollouts on the cpu platform (each check is one
# TransferQueue metadata listing, a few milliseconds)
CPU_POLL_INTERVAL_S = 0.05

_APPLIED: dict[tuple[str, str], object] = {}


def _on_cpu() -> bool:
    from verl.utils.device import get_device_name

    return get_device_name() == "cpu"


def _initialize_global_process_group(original):
    def initialize_global_process_group(timeout_second=36000):
        if not _on_cpu():
            return original(timeout_second)
        import torch.distributed

        torch.distributed.init_process_group(
            backend="gloo",
            timeout=timedelta(seconds=timeout_second),
            init_method=os.environ.get("DIST_INIT_METHOD", None),
        )
        return int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

    return initialize_global_process_group


def _initialize_global_process_group_ray(original):
    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        if not _on_cpu():
            return original(timeout_second, backend)
        out = original(timeout_second, backend="gloo")
        _say_where()
        return out

    return initialize_global_process_group_ray


@functools.cache
def _say_where() -> None:
    """One line in the run's log, once a process: which Ray node this rank runs on (a run across nodes shows it is)."""
    import socket

    import ray
    import torch.distributed

    node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else "-"
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    print(f"trainctl: rank {rank} of {world} on Ray node {node} ({socket.gethostname()})", flush=True)


HEAD_RESOURCE = "node:__internal_head__"  # the resource only Ray's head node has


def cpu_nodes(groups: int, per_group: int) -> list[str]:
    """Node ids for `groups` node groups of `per_group` processes, a node each, among the CPUs the nodes have left
    (TransferQueue's actors hold theirs on the head by now: _on_the_head): where the plan's capacity check placed
    them (trainctl.launchers.capacity.place), the head first."""
    import ray
    from ray._private.state import available_resources_per_node

    from trainctl.launchers.capacity import Node, place

    left = available_resources_per_node()
    nodes = [
        Node(n["NodeManagerAddress"], int(left.get(n["NodeID"], {}).get("CPU", 0)), 0, id=n["NodeID"],
             head=HEAD_RESOURCE in n["Resources"])
        for n in ray.nodes() if n["Alive"]
    ]  # fmt: skip
    placed = place(nodes, groups, per_group)
    if not placed.fits:
        # a group pinned to a node without room would wait for its CPUs forever
        raise ValueError(
            f"the run asks for {groups} nodes of {per_group} training process(es) (hardware.nnodes x "
            f"hardware.gpus_per_node), and the Ray cluster's {len(nodes)} alive node(s) have too few CPUs left "
            f"(TransferQueue's controller and storage hold theirs on the head): {placed.words(False)}"
        )
    return [s.node.id for s in placed.slots]


def _head_affinity():
    """A scheduling strategy for Ray's head node (the capacity check places verl's CPU-holding actors there)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    head = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and HEAD_RESOURCE in n["Resources"])
    return NodeAffinitySchedulingStrategy(node_id=head, soft=False)


def _controller_on_the_head(original):
    class ControllerOnTheHead:
        """TransferQueue's controller class (a Ray actor class), created on the head on the cpu platform."""

        def options(self, **kwargs):
            if _on_cpu():
                kwargs.setdefault("scheduling_strategy", _head_affinity())
            return original.options(**kwargs)

        def __getattr__(self, name):
            return getattr(original, name)

    return ControllerOnTheHead()


def _storage_on_the_head(original):
    def get_node_round_robin_scheduling_strategies(num_actors, required_node_resource=None):
        if not _on_cpu() or required_node_resource is not None:
            return original(num_actors, required_node_resource)
        return [_head_affinity() for _ in range(num_actors)]

    return get_node_round_robin_scheduling_strategies


def _get_placement_groups(original):
    def get_placement_groups(self, strategy="STRICT_PACK", name=None, device_name="cuda"):
        from trainctl.runtime.split_placement import pinned_nodes

        nodes = pinned_nodes(self, cpu_nodes) if _on_cpu() and self.pgs is None else None
        if nodes is None:
            return original(self, strategy, name, device_name)
        import ray
        from ray.util.placement_group import placement_group
        from verl.single_controller.ray.base import sort_placement_group_by_node_ip

        # verl's own groups (a bundle of one CPU per process, its names), each pinned to a node of its own
        prefix = name or f"{self.name_prefix}verl_group_{'_'.join(str(c) for c in self._store)}:"
        lifetime = "detached" if self.detached else None
        pgs = [
            placement_group(
                bundles=[{"CPU": 1} for _ in range(count)],
                strategy=strategy,
                name=prefix + str(i),
                lifetime=lifetime,
                bundle_label_selector=[{"ray.io/node-id": node}] * count,
            )
            for i, (count, node) in enumerate(zip(self._store, nodes, strict=True))
        ]
        ray.get([pg.ready() for pg in pgs])
        self.pgs = sort_placement_group_by_node_ip(pgs)
        return pgs

    return get_placement_groups


def _check_resource_available(original):
    def _check_resource_available(self):
        if not _on_cpu():
            return original(self)
        import ray

        available = sum(n.get("CPU", 0) for n in ray._private.state.available_resources_per_node().values())
        required = sum(n for nodes in self.resource_pool_spec.values() for n in nodes)
        if available < required:
            raise ValueError(
                f"Ray has {available:g} CPUs available but the worker pools need {required}: "
                "raise hardware.ray_num_cpus or lower hardware.gpus_per_node"
            )

    return _check_resource_available


def _cpu_offload_policy(original):
    class CPUOffloadPolicy(original):
        """verl's reference-model offload policy, without pinned memory when there is no accelerator."""

        def __init__(self, pin_memory: bool = True):
            super().__init__(pin_memory=pin_memory and not _on_cpu())

    return CPUOffloadPolicy


def flash_attn_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("flash_attn") is not None


def _load_valuehead_model(original):
    def load_valuehead_model(local_path, torch_dtype, model_config, trust_remote_code):
        if not _on_cpu() and flash_attn_installed():
            return original(local_path, torch_dtype, model_config, trust_remote_code)
        from transformers import AutoModelForTokenClassification

        # verl's first choice, with the attention the model config asks for (sdpa on cpu) instead of flash-attn
        return AutoModelForTokenClassification.from_pretrained(
            pretrained_model_name_or_path=local_path,
            torch_dtype=torch_dtype,
            config=model_config,
            attn_implementation=getattr(model_config, "_attn_implementation", None) or "sdpa",
            trust_remote_code=trust_remote_code,
        )

    return load_valuehead_model


def _replay_buffer_init(original):
    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if _on_cpu() and "poll_interval" not in signature.bind(self, *args, **kwargs).arguments:
            self.poll_interval = CPU_POLL_INTERVAL_S

    return __init__


@functools.cache
def metric_sets() -> tuple:
    """The metric sets this process adds to the training log, as trainctl's launch environment asks (each set's ENV:
    TRAINCTL_REWARD_KIND, TRAINCTL_TOOL_CALLS, TRAINCTL_ENV, TRAINCTL_OFFPOLICY); built once, when the trainer's
    module is patched: the wrappers of one set share its state."""
    return tuple(cls(os.environ[cls.ENV]) for cls in _metric_set_classes())


def _metric_set_classes() -> list[type]:
    from trainctl.runtime.env_metrics import EnvMetrics
    from trainctl.runtime.offpolicy_metrics import OffpolicyMetrics
    from trainctl.runtime.reward_metrics import RewardMetrics
    from trainctl.runtime.tool_metrics import ToolMetrics

    return [cls for cls in (RewardMetrics, ToolMetrics, EnvMetrics, OffpolicyMetrics) if os.environ.get(cls.ENV)]


def _sets_wrapping(func: str) -> list:
    return [s for s in metric_sets() if func in s.WRAPS]


def _compute_data_metrics(original):
    sets = _sets_wrapping("compute_data_metrics")

    def compute_data_metrics_with_reward(batch, use_critic=True):
        out = original(batch=batch, use_critic=use_critic)
        for s in sets:
            out.update(s.data_metrics(batch))
        return out

    return compute_data_metrics_with_reward


def _compute_metrics(original):
    sets = _sets_wrapping("PPOTrainer._compute_metrics")

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        result = original(self, batch, metrics, timing_raw, global_steps, epoch)
        for s in sets:
            try:
                metrics.update(s.step_metrics(batch, global_steps, metrics))
            except Exception as e:  # the figures are a report: their absence must not stop training
                logger.warning("trainctl: no %s metrics for step %s: %s", s.name, global_steps, e)
        return result

    return _compute_metrics


def _step(original):
    sets = _sets_wrapping("PPOTrainer.step")

    def step(self, metrics, timing_raw):
        batch = original(self, metrics, timing_raw)
        for s in sets:  # not a report only: a curriculum that cannot move must stop the run
            s.after_step(batch, self.global_steps)
        return batch

    return step


def _validate(original):
    sets = _sets_wrapping("PPOTrainer._validate")

    def _validate(self, *args, **kwargs):
        for s in sets:
            with contextlib.suppress(Exception):  # a report only
                s.before_validation()
        out = original(self, *args, **kwargs)
        for s in sets:
            try:
                figures = s.validation_metrics()
                if isinstance(out, dict):
                    out.update(figures)
            except Exception as e:
                logger.warning("trainctl: no validation %s metrics: %s", s.name, e)
        return out

    return _validate


def _wrapper(module: str, name: str):  # one in trainctl.runtime.`module`, imported when its patch is applied
    def wrap(original):
        return getattr(importlib.import_module(f"trainctl.runtime.{module}"), name)(original)

    return wrap


_WRAPPERS = {
    "initialize_global_process_group": _initialize_global_process_group,
    "initialize_global_process_group_ray": _initialize_global_process_group_ray,
    "ResourcePoolManager._check_resource_available": _check_resource_available,
    "RayResourcePool.get_placement_groups": _get_placement_groups,
    "TransferQueueController": _controller_on_the_head,
    "get_node_round_robin_scheduling_strategies": _storage_on_the_head,
    "CPUOffloadPolicy": _cpu_offload_policy,
    "load_valuehead_model": _load_valuehead_model,
    "ReplayBuffer.__init__": _replay_buffer_init,
    "logprobs_from_logits": _wrapper("step_speed", "wrap_logprobs_from_logits"),
    "dispatch_cpu_unquantized_gemm": _wrapper("vllm_cpu", "wrap_gemm_dispatch"),
    "_run_in_subprocess": _wrapper("vllm_cpu", "wrap_model_inspection"),
    "compiled_random_sample": _wrapper("vllm_cpu", "wrap_random_sample"),
    "batched_count_greater_than": _wrapper("vllm_cpu", "wrap_count_greater_than"),
    "compute_data_metrics": _compute_data_metrics,
    "PPOTrainer._compute_metrics": _compute_metrics,
    "PPOTrainer._validate": _validate,
    "PPOTrainer.step": _step,
    "hydra": _wrapper("step_speed", "wrap_hydra"),
    "tq": _wrapper("step_speed", "wrap_transfer_queue"),
    "list_of_dict_to_tensordict": _wrapper("step_speed", "wrap_list_of_dict_to_tensordict"),
    "FSDPEngineWithLMHead.forward_step": _wrapper("step_speed", "wrap_forward_step"),
    "AgentLoopWorker.__init__": _wrapper("step_speed", "wrap_agent_loop_worker_init"),
    "ActorRolloutRefWorker.compute_ref_log_prob": _wrapper("step_speed", "wrap_training_pass"),
    "ActorRolloutRefWorker.compute_log_prob": _wrapper("step_speed", "wrap_training_pass"),
    "ActorRolloutRefWorker.update_actor": _wrapper("step_speed", "wrap_training_pass"),
    "TrainingWorker.infer_batch": _wrapper("step_speed", "wrap_training_pass"),
    "TrainingWorker.train_mini_batch": _wrapper("step_speed", "wrap_training_pass"),
    "psutil": _wrapper("step_speed", "wrap_psutil"),
    "TQ_NUM_THREADS": _wrapper("step_speed", "wrap_tq_num_threads"),
    "ToolAgentLoop._handle_pending_state": _wrapper("trajectories", "wrap_pending_state"),
    "ToolAgentLoop.run": _wrapper("trajectories", "wrap_run"),
    "PPOTrainer._write_generations": _wrapper("trajectories", "wrap_write_generations"),
}


def _resolve(module_name: str, name: str):
    """(owner, attribute) of a dotted name inside a module: a function, a class, or a class's method."""
    return _owner(importlib.import_module(module_name), name)


def _owner(module, name: str):
    owner = module
    *path, attr = name.split(".")
    for p in path:
        owner = getattr(owner, p)
    return owner, attr


# without flash-attn on a GPU, only the critic's loader needs trainctl's help
GPU_WITHOUT_FLASH_ATTN = (("verl.utils.model", "load_valuehead_model"),)


def apply(only: tuple[tuple[str, str], ...] | None = None) -> None:
    """Apply every patch (or `only` these) once; refuse on a verl version they were not written for."""
    import verl

    if verl.__version__ != VERL_VERSION:
        raise RuntimeError(
            f"trainctl's CPU support patches verl {VERL_VERSION}, but verl {verl.__version__} is installed: "
            f"install verl=={VERL_VERSION}, or run on GPUs (hardware=1gpu/8gpu/...)"
        )
    _apply(tuple(only or PATCHES))
    logger.debug("trainctl applied %d verl patches", len(_APPLIED))


def apply_vllm_cpu() -> None:
    """Apply the patches vLLM's CPU build needs under verl's weight sync (in a rollout's vLLM worker), once."""
    _apply(tuple(VLLM_CPU_PATCHES))


def apply_vllm_cpu_start() -> None:
    """Apply the patches of vLLM's CPU build as an engine starts (in any vLLM process on the CPU platform), once."""
    _apply(tuple(VLLM_CPU_START_PATCHES))


def apply_metrics() -> None:
    """Wrap the trainer's metrics for the metric sets the environment asks for (none: nothing is wrapped), once the
    trainer's module is imported. A report only: on a verl they were not written for, they are left out."""
    import verl

    funcs = {func for cls in _metric_set_classes() for func in cls.WRAPS}
    wanted = tuple(key for key in METRIC_PATCHES if key[1] in funcs)
    if not wanted:
        return
    if verl.__version__ != VERL_VERSION:
        logger.warning(
            "trainctl: its training-log metrics are written for verl %s, not %s: left out",
            VERL_VERSION,
            verl.__version__,
        )
        return
    _apply(wanted)


def apply_trajectories() -> None:
    """Wrap the tool agent loop and the trainer's dump (trainctl.runtime.trajectories) once their modules are
    imported. A record only: on a verl they were not written for, they are left out."""
    import verl

    if verl.__version__ != VERL_VERSION:
        logger.warning(
            "trainctl: trajectory turns are written for verl %s, not %s: left out", VERL_VERSION, verl.__version__
        )
        return
    _apply(tuple(TRAJECTORY_PATCHES))


def _apply(wanted: tuple[tuple[str, str], ...]) -> None:
    """Patch each module when a process imports it: at once if it is imported already, else right after it is
    (before the importer gets it). Most processes of a run import few of them (the driver none: the training
    engines alone cost it 2.3 s), so none is imported for its patch."""
    import wrapt

    for module_name in dict.fromkeys(m for m, _ in wanted):
        wrapt.register_post_import_hook(functools.partial(_patch_module, wanted=wanted), module_name)


def _patch_module(module, wanted: tuple[tuple[str, str], ...], name: str | None = None) -> None:
    module_name = name or module.__name__
    for patched_module, func in wanted:
        if patched_module != module_name or (module_name, func) in _APPLIED:
            continue
        owner, attr = _owner(module, func)
        original = getattr(owner, attr)
        setattr(owner, attr, _WRAPPERS[func](original))
        _APPLIED[(module_name, func)] = original


def original(module_name: str, func: str):
    """The unpatched function (for tests)."""
    return _APPLIED.get((module_name, func))
