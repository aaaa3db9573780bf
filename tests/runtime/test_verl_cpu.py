"""trainctl.runtime.verl_cpu: the `cpu` platform, registered with verl's own registries by trainctl's verl plugin
(VERL_PLATFORM=cpu), and the device module verl calls on it."""

from __future__ import annotations

import psutil
import torch

from trainctl.runtime import verl_cpu


def test_plugin_is_inert_without_verl_platform_cpu(plugin_probe):
    facts = plugin_probe()
    assert (facts["cpu_platform_installed"], facts["cpu_platform_registered"]) == (False, False)


def test_plugin_selects_the_cpu_platform_when_asked(plugin_probe):
    facts = plugin_probe(VERL_PLATFORM="cpu")
    assert (facts["device"], facts["cpu_fsdp2_engine"]) == (["cpu", "gloo"], True)


def test_the_hf_rollout_plugs_into_verls_registries(plugin_probe):
    """verl finds trainctl's rollout through its own registries, in every process the plugin is loaded in."""
    assert plugin_probe(VERL_PLATFORM="cpu")["hf_rollout"] == ["HFServerAdapter", "HFReplica"]


def test_the_platform_places_workers_on_rays_cpus_and_talks_gloo():
    platform = verl_cpu.PlatformCPU()
    assert (platform.device_name, platform.communication_backend_name(), platform.current_device()) == (
        "cpu",
        "gloo",
        "cpu",
    )
    assert platform.ray_resource_name() == "CPU" and platform.ray_resource_options(2) == {"num_cpus": 2}
    # never picked by verl's auto-detection: only VERL_PLATFORM=cpu selects it
    assert platform.is_available() and not platform.is_platform_available()
    assert platform.device_module is verl_cpu.CPU_DEVICE


def test_the_device_module_is_torch_cpu_with_memory_calls_that_do_nothing():
    device = verl_cpu.CPU_DEVICE
    assert device.memory_allocated() == 0 and device.empty_cache() is None
    available, total = device.mem_get_info()
    assert 0 < available <= total == psutil.virtual_memory().total
    assert device.device_count() == 1 and device.get_device_name() == "cpu"
    assert device.synchronize is not torch.cpu.synchronize  # trainctl's no-op, not torch's
    assert device.Stream is torch.cpu.Stream  # anything else: torch.cpu's
    state = device.get_rng_state()
    first = torch.rand(1)
    device.set_rng_state(state)
    assert torch.equal(torch.rand(1), first)
