"""The patches trainctl applies to verl where verl offers no hook. All of them, here, guarded to verl 0.9.1.

Each one replaces a module attribute with a wrapper that behaves exactly like the original unless the process
runs on trainctl's CPU platform. tests/runtime/test_verl_patches.py pins the source of every patched function,
so a verl upgrade that changes them fails loudly instead of silently running something else.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import inspect
import logging
import os
import sys
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
}

# modules that only some processes import (the trainer's driver, the agent-loop workers), and that cost seconds to
# import: patched when a process first imports them, not imported by every process the plugin is loaded in
ON_IMPORT = {"verl.trainer.ppo.v1.replay_buffer"}

# seconds between the replay buffer's checks for finished rollouts on the cpu platform (each check is one
# TransferQueue metadata listing, a few milliseconds)
CPU_POLL_INTERVAL_S = 0.05

# elements of logits per logsumexp on the cpu platform: a 16 MB temporary in fp32, whatever the vocabulary (verl's
# row-at-a-time loop bounds memory too, at one Python iteration per token)
CPU_LOGSUMEXP_CHUNK_ELEMENTS = 1 << 22

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
        return original(timeout_second, backend="gloo")

    return initialize_global_process_group_ray


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


def logprobs_in_chunks(logits, labels, chunk_elements: int = CPU_LOGSUMEXP_CHUNK_ELEMENTS):
    """log_softmax(logits)[labels] as verl's logprobs_from_logits_v2 computes it for fp32/fp64 (the label's logit
    minus the row's logsumexp), over as many rows at once as fit in `chunk_elements`: the same values, bit for bit
    (tests/runtime/test_verl_patches.py), without a Python iteration per token."""
    import torch

    vocab = logits.shape[-1]
    rows = logits.reshape(-1, vocab)
    label_logits = torch.gather(logits, dim=-1, index=labels.unsqueeze(-1)).squeeze(-1)
    per_chunk = max(1, chunk_elements // vocab)
    logsumexp = torch.cat([torch.logsumexp(chunk, dim=-1) for chunk in rows.split(per_chunk)])
    return label_logits - logsumexp.view(label_logits.shape)


def _logprobs_from_logits(original):
    import torch

    @functools.wraps(original)
    def logprobs_from_logits(logits, labels, inplace_backward=True):
        if not _on_cpu() or logits.dtype not in (torch.float32, torch.float64):
            return original(logits, labels, inplace_backward)
        return logprobs_in_chunks(logits, labels)

    return logprobs_from_logits


_WRAPPERS = {
    "initialize_global_process_group": _initialize_global_process_group,
    "initialize_global_process_group_ray": _initialize_global_process_group_ray,
    "ResourcePoolManager._check_resource_available": _check_resource_available,
    "CPUOffloadPolicy": _cpu_offload_policy,
    "load_valuehead_model": _load_valuehead_model,
    "ReplayBuffer.__init__": _replay_buffer_init,
    "logprobs_from_logits": _logprobs_from_logits,
}


def _resolve(module_name: str, name: str):
    """(owner, attribute) of a dotted name inside a module: a function, a class, or a class's method."""
    owner = importlib.import_module(module_name)
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
    wanted = tuple(only or PATCHES)
    for module_name in dict.fromkeys(m for m, _ in wanted):
        if module_name in ON_IMPORT and module_name not in sys.modules:
            _install_import_hook(wanted)
        else:
            _patch_module(module_name, wanted)
    logger.debug("trainctl applied %d verl patches", len(_APPLIED))


def _patch_module(module_name: str, wanted: tuple[tuple[str, str], ...] = tuple(PATCHES)) -> None:
    for patched_module, func in wanted:
        if patched_module != module_name or (module_name, func) in _APPLIED:
            continue
        owner, attr = _resolve(module_name, func)
        original = getattr(owner, attr)
        setattr(owner, attr, _WRAPPERS[func](original))
        _APPLIED[(module_name, func)] = original


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """A post-import hook: finds an ON_IMPORT module as Python would, and patches it right after it runs."""

    def __init__(self, wanted: tuple[tuple[str, str], ...]):
        self.wanted = wanted

    def find_spec(self, fullname, path, target=None):
        if fullname not in ON_IMPORT or fullname in sys.modules:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _PatchingLoader(spec.loader, self.wanted)
        return spec


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader, wanted: tuple[tuple[str, str], ...]):
        self.loader, self.wanted = loader, wanted

    def __getattr__(self, name):  # get_source, get_filename, ...: the real loader's
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        _patch_module(module.__name__, self.wanted)


def _install_import_hook(wanted: tuple[tuple[str, str], ...]) -> None:
    if not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport(wanted))


def original(module_name: str, func: str):
    """The unpatched function (for tests)."""
    return _APPLIED.get((module_name, func))
