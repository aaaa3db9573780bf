"""Run by the `plugin_probe` fixture (tests/conftest.py) in a fresh process: what trainctl's verl plugin did
in this process's environment, printed as one JSON line. The order matters: each fact is read before anything
later could change it."""

import gc
import json
import sys
from pathlib import Path

FROZEN_BEFORE = gc.get_freeze_count()  # the zygote's (torch, transformers, ...)
import verl  # noqa: E402, F401 - loads trainctl's plugin (entry point group verl.plugins), as every verl process does

FROZEN_BY_IMPORT = gc.get_freeze_count() - FROZEN_BEFORE
import verl.utils.distributed as distributed  # noqa: E402
import verl.utils.model as model  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.plugin.platform import PlatformRegistry  # noqa: E402

from trainctl.runtime import verl_cpu, verl_patches  # noqa: E402

REPLAY_BUFFER = "verl.trainer.ppo.v1.replay_buffer"
facts = {
    # what `import verl` left frozen, and whether later heavy imports load with the collector paused
    "frozen_by_verl_import": FROZEN_BY_IMPORT,
    "heavy_loads_paused": any(type(f).__name__ == "_HeavyLoadsWithCollectorPaused" for f in sys.meta_path),
    # the plugin does not import the replay buffer in every process (seconds each)
    "replay_buffer_imported": REPLAY_BUFFER in sys.modules,
    "cpu_platform_installed": verl_cpu._INSTALLED,
    "cpu_platform_registered": "cpu" in PlatformRegistry.registered_names(),
    "load_valuehead_model": model.load_valuehead_model.__module__,
    "initialize_global_process_group": distributed.initialize_global_process_group.__module__,
}
if verl_cpu._INSTALLED:
    from verl.utils.device import get_device_name, get_nccl_backend
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.rollout.base import get_rollout_class
    from verl.workers.rollout.replica import get_rollout_replica_class

    facts["device"] = [get_device_name(), get_nccl_backend()]
    facts["cpu_fsdp2_engine"] = "cpu" in EngineRegistry._engines["language_model"]["fsdp2"]
    facts["hf_rollout"] = [get_rollout_class("hf", "async").__name__, get_rollout_replica_class("hf").__name__]

# off the cpu platform the plugin applies nothing: applied here, the wrappers must be inert
verl_patches.apply()
facts["replay_buffer_imported_after_apply"] = REPLAY_BUFFER in sys.modules
import verl.trainer.ppo.v1.trainer_base as trainer_base  # noqa: E402
from verl.trainer.ppo.v1 import PPOTrainer  # noqa: E402, F401 - as main_ppo does: the package, then the module inside
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync  # noqa: E402

empty = OmegaConf.create({})
facts["poll_interval"] = ReplayBuffer("sync", empty, 8, "drop", empty).poll_interval
facts["poll_interval_given"] = ReplayBufferAsync("async", empty, 8, "drop", empty, poll_interval=1.5).poll_interval
facts["replay_buffer_patched"] = hasattr(ReplayBuffer.__init__, "__wrapped__")
facts["compute_data_metrics"] = trainer_base.compute_data_metrics.__name__
facts["compute_metrics"] = trainer_base.PPOTrainer._compute_metrics.__module__
facts["validate"] = trainer_base.PPOTrainer._validate.__module__
import verl.experimental.agent_loop.agent_loop as agent_loop  # noqa: E402

facts["agent_loop_hydra"] = type(agent_loop.hydra).__module__
facts["agent_loop_worker_init"] = Path(agent_loop.AgentLoopWorker.__init__.__code__.co_filename).name
import verl.trainer.ppo.v1.agent_loop_tq as agent_loop_tq  # noqa: E402

facts["agent_loop_tq"] = [
    type(agent_loop_tq.tq).__name__,
    agent_loop_tq.list_of_dict_to_tensordict([{"x": 1}]).__class__.__name__,
]
import transfer_queue.client  # noqa: E402
import transfer_queue.storage.simple_storage  # noqa: E402
import transfer_queue.utils.common  # noqa: E402

facts["tq_num_threads"] = [transfer_queue.client.TQ_NUM_THREADS, transfer_queue.storage.simple_storage.TQ_NUM_THREADS]
facts["tq_psutil"] = type(transfer_queue.utils.common.psutil).__name__
import verl.workers.engine.fsdp.transformer_impl as engine  # noqa: E402

# the file of the code that runs (the wrapper keeps the name and module of what it wraps)
facts["forward_step"] = Path(engine.FSDPEngineWithLMHead.forward_step.__code__.co_filename).name
import verl.workers.engine_workers as workers  # noqa: E402

facts["training_passes"] = sorted(
    {
        Path(getattr(getattr(workers, owner), name).__code__.co_filename).name
        for owner, name in (
            ("ActorRolloutRefWorker", "compute_ref_log_prob"),
            ("ActorRolloutRefWorker", "compute_log_prob"),
            ("ActorRolloutRefWorker", "update_actor"),
            ("TrainingWorker", "infer_batch"),
            ("TrainingWorker", "train_mini_batch"),
        )
    }
)
# transformers' generation code is loaded by now (verl's engines import it): with scikit-learn only where trainctl did
# not launch the process (trainctl.import_cost; tests/test_import_cost.py)
facts["sklearn_with_generation"] = [
    "sklearn" in sys.modules, "transformers.generation.candidate_generator" in sys.modules,
]  # fmt: skip
facts["scipy_with_losses"] = [
    "scipy.optimize" in sys.modules, "transformers.loss.loss_for_object_detection" in sys.modules,
]  # fmt: skip
print(json.dumps(facts))
