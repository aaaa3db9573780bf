"""What vLLM's CPU build can run, checked before anything starts: verl's vLLM rollout on hardware=cpu, and eval,
chat and `model serve` through vLLM there. Without these a run would start Ray, the trainer and a vLLM server, and
then die at the first request."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from trainctl.errors import Problem
from trainctl.facts.vllm import CPU_BUILD, CPU_HEAD_SIZES


def installed() -> bool:
    return importlib.util.find_spec("vllm") is not None


def head_size(folder: Path | None, arch=None) -> int | None:
    """The model's attention head size: its config.json's (head_dim, else hidden size / heads), else the model
    option's declared architecture; None when neither says."""
    config = {}
    if folder is not None:
        try:
            config = json.loads((Path(folder) / "config.json").read_text())
        except (OSError, ValueError):
            config = {}
    config = config.get("text_config") or config
    if config.get("head_dim"):
        return int(config["head_dim"])
    if config.get("hidden_size") and config.get("num_attention_heads"):
        return int(config["hidden_size"]) // int(config["num_attention_heads"])
    if arch is not None and getattr(arch, "hidden_size", None) and getattr(arch, "heads", None):
        return int(arch.hidden_size) // int(arch.heads)
    return None


def cpu_problems(folder: Path | None, arch=None, *, model: str = "the model", key: str = "hardware.rollout_engine"):
    """Why vLLM cannot run this model on this machine's CPU (empty when it can)."""
    if not installed():
        return [
            Problem(
                "hardware.rollout_engine = vllm on the CPU needs vLLM's CPU build, which is not installed here.",
                key=key,
                hint=f"make install (it installs {CPU_BUILD} where there is no CUDA), or hardware.rollout_engine=hf "
                "(trainctl's CPU sampler)",
            )
        ]
    size = head_size(folder, arch)
    if size is not None and size not in CPU_HEAD_SIZES:
        return [
            Problem(
                f"{model} has attention heads of {size} dimensions; vLLM's CPU attention takes only "
                f"{', '.join(map(str, CPU_HEAD_SIZES))}.",
                key=key,
                hint="hardware.rollout_engine=hf (trainctl's CPU sampler takes any head size)",
            )
        ]
    return []


# rollout settings vLLM's CPU build refuses once its server is up (vllm/platforms/cpu.py), with the value that runs
CPU_REFUSED = {
    "enable_sleep_mode": (True, False, "vLLM's CPU build has no sleep mode ('Sleep mode is not supported on current "
                          "platform', once its server has started)"),
    "free_cache_engine": (True, False, "freeing the cache between steps puts vLLM's engine to sleep, which its CPU "
                          "build cannot"),
}  # fmt: skip


def cpu_rollout_problems(value, prefix: str = "actor_rollout_ref.rollout") -> list[Problem]:
    """The rollout's settings (`value` reads a backend key) that vLLM's CPU build refuses only after it started."""
    problems = []
    lora, merge = "actor_rollout_ref.model.lora_rank", "actor_rollout_ref.model.lora.merge"
    if (value(lora) or 0) > 0 and not value(merge):
        # measured: the engine died at the first weight sync ('WeightsMapper' object has no attribute
        # 'get_unstacked_mapper', verl/utils/vllm/utils.py) and the trainer waited on it until it was stopped; with
        # the adapters merged into the weights it sends, verl syncs them as full weights (trainctl's default here)
        problems.append(
            Problem(
                f"{merge} = false with {lora} = {value(lora)}: verl 0.9.1 loads separate LoRA adapters into vLLM "
                "through WeightsMapper.get_unstacked_mapper, which vLLM's CPU build (0.31.0) does not have: its engine "
                "dies at the first weight sync.",
                key=merge,
                hint=f"{merge}=true (the adapters folded into the weights each sync sends: trainctl's default on cpu)",
            )
        )
    for name, (refused, works, why) in CPU_REFUSED.items():
        key = f"{prefix}.{name}"
        if value(key) is refused:
            problems.append(
                Problem(f"{key} = {str(refused).lower()}: {why}.", key=key, hint=f"{key}={str(works).lower()}")
            )
    return problems
