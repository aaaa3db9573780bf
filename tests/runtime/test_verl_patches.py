"""trainctl's verl patches are pinned to verl 0.9.1's source: a verl upgrade that changes it fails here."""

from __future__ import annotations

import hashlib
import inspect
import subprocess
import sys

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
    # a class from torch, replaced where verl uses it: pinned is verl's method that builds it
    ("verl.workers.engine.fsdp.transformer_impl", "CPUOffloadPolicy"): (
        "35b7b539858443e45894da2d9675fb5a1d7b2bbb7c7c8b35605b0746d3179213"
    ),
    ("verl.utils.model", "load_valuehead_model"): ("2371ca280654b53bc2f25101ff2eb1898aafef14570f7ed94883d0b4a4ac825b"),
    ("verl.trainer.ppo.v1.replay_buffer", "ReplayBuffer.__init__"): (
        "0c37a4862999198830cd4b4835116df2d6e672d105caee9491487f748d94bb90"
    ),
}
# where a patched name is not a verl function, the verl code that uses it
_PINNED_USER = {("verl.workers.engine.fsdp.transformer_impl", "CPUOffloadPolicy"): "FSDPEngine._build_fsdp_module"}


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
    assert set(PINNED) == set(verl_patches.PATCHES)
    for (module, func), digest in PINNED.items():
        got = _source_digest(module, func)
        assert got == digest, f"verl changed {module}.{func}: review trainctl.runtime.verl_patches"


def test_the_backend_string_verl_builds_still_names_the_device_twice():
    """The reason for the process-group patch: if verl stops doing this, the patch can go."""
    import verl.utils.distributed as dist

    fn = verl_patches.original("verl.utils.distributed", "initialize_global_process_group")
    src = inspect.getsource(fn or dist.initialize_global_process_group)
    assert 'f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"' in src


def test_plugin_is_inert_without_verl_platform_cpu():
    code = (
        "import os; os.environ.pop('VERL_PLATFORM', None)\n"
        "import verl\n"
        "from verl.plugin.platform import PlatformRegistry\n"
        "from trainctl.runtime import verl_cpu\n"
        "print(verl_cpu._INSTALLED, 'cpu' in PlatformRegistry.registered_names())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "False False"


def test_plugin_selects_the_cpu_platform_when_asked():
    code = (
        "import verl\n"
        "from verl.utils.device import get_device_name, get_nccl_backend\n"
        "from verl.workers.engine.base import EngineRegistry\n"
        "print(get_device_name(), get_nccl_backend(), 'cpu' in EngineRegistry._engines['language_model']['fsdp2'])\n"
    )
    env = {**__import__("os").environ, "VERL_PLATFORM": "cpu"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out.strip().splitlines()[-1] == "cpu gloo True"


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


def test_the_replay_buffer_still_sleeps_a_poll_interval_that_no_config_sets():
    """The reason for the poll-interval patch: if verl makes it configurable, set it through the config instead."""
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    assert "time.sleep(self.poll_interval)" in inspect.getsource(ReplayBuffer._wait_for_next_poll)
    assert inspect.signature(ReplayBuffer.__init__).parameters["poll_interval"].default == 2.0
    assert "poll_interval" not in inspect.getsource(PPOTrainer._build_replay_buffer)


def test_the_replay_buffer_is_patched_when_imported_and_polls_quickly_only_on_cpu():
    """The plugin does not import the replay buffer in every process (seconds each); a process that imports it
    gets the patched class, with a short poll interval on the cpu platform and verl's own elsewhere."""
    code = (
        "import sys, verl\n"
        "from omegaconf import OmegaConf\n"
        "from trainctl.runtime import verl_patches\n"
        "verl_patches.apply()  # off the cpu platform, the plugin applies nothing: the wrappers must be inert\n"
        "deferred = 'verl.trainer.ppo.v1.replay_buffer' not in sys.modules\n"
        "from verl.trainer.ppo.v1 import PPOTrainer  # as main_ppo does: the package, then the module inside\n"
        "from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync\n"
        "empty = OmegaConf.create({})\n"
        "default = ReplayBuffer('sync', empty, 8, 'drop', empty).poll_interval\n"
        "given = ReplayBufferAsync('async', empty, 8, 'drop', empty, poll_interval=1.5).poll_interval\n"
        "patched = hasattr(ReplayBuffer.__init__, '__wrapped__')\n"
        "print(deferred, patched, default, given)\n"
    )
    for platform, expected in (
        ("cpu", f"True True {verl_patches.CPU_POLL_INTERVAL_S} 1.5"),
        (None, "True True 2.0 1.5"),
    ):
        env = {k: v for k, v in __import__("os").environ.items() if k != "VERL_PLATFORM"}
        if platform:
            env["VERL_PLATFORM"] = platform
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.strip().splitlines()[-1] == expected, (platform, out.stdout)


def test_the_hf_rollout_plugs_into_verls_registries():
    """verl finds trainctl's rollout through its own registries, in every process the plugin is loaded in."""
    code = (
        "import os; os.environ['VERL_PLATFORM'] = 'cpu'\n"
        "import verl\n"
        "from verl.workers.rollout.base import get_rollout_class\n"
        "from verl.workers.rollout.replica import get_rollout_replica_class\n"
        "print(get_rollout_class('hf', 'async').__name__, get_rollout_replica_class('hf').__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "HFServerAdapter HFReplica"


def test_in_a_gpu_run_without_flash_attn_only_the_critic_loader_is_patched():
    """A run trainctl launched (TRAINCTL_LAUNCHED=1) on a GPU machine without flash-attn: verl's critic loader
    would ask for flash_attention_2; the plugin swaps in the attention the model config names, nothing else."""
    code = (
        "import os; os.environ.pop('VERL_PLATFORM', None)\n"
        "import verl, verl.utils.model as m, verl.utils.distributed as d\n"
        "from trainctl.runtime import verl_cpu, verl_patches\n"
        "print(verl_cpu._INSTALLED, m.load_valuehead_model.__module__, d.initialize_global_process_group.__module__)\n"
    )
    env = {**__import__("os").environ, "TRAINCTL_LAUNCHED": "1"}
    env.pop("VERL_PLATFORM", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out.strip().splitlines()[-1] == "False trainctl.runtime.verl_patches verl.utils.distributed"
