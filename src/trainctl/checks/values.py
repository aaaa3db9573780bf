"""trainctl's own settings: types, ranges and choices, checked before any backend key is looked at."""

from __future__ import annotations

import re
from typing import Any

from trainctl.config.compose import Composition
from trainctl.config.search import SearchPath
from trainctl.errors import Problem

# key: (type, rule). Types: int, float, str, bool, list. Rules: (min, max) for numbers, a tuple of choices for str.
# A trailing "?" on the type allows null.
FIELDS: dict[str, tuple[str, Any]] = {
    "algorithm.family": ("str", ("sft", "dpo", "ppo")),
    "algorithm.data_format": ("str", ("rl", "sft", "dpo")),
    "algorithm.reward_fn": ("str?", None),
    "model.path": ("str", None),
    "model.context_length": ("int", (1, None)),
    "model.params": ("float?", (1, None)),
    "data.train_files": ("str", None),
    "data.val_files": ("str?", None),
    "data.max_prompt_length": ("int", (1, None)),
    "data.max_response_length": ("int", (1, None)),
    "data.formats": ("list", ("rl", "sft", "dpo")),
    "data.reward_fn": ("str?", None),
    "hardware.nnodes": ("int", (1, None)),
    "hardware.gpus_per_node": ("int", (1, None)),
    "hardware.gpu_memory_gb": ("float?", (1, None)),
    "hardware.device": ("str", ("cpu", "cuda")),
    "hardware.launcher": ("str", ("local", "ray_cluster", "ray_job")),
    "hardware.rollout_engine": ("str", None),
    "hardware.rollout_tp": ("int", (1, None)),
    "hardware.gpu_memory_utilization": ("float", (0.01, 1.0)),
    "hardware.micro_batch_size_per_gpu": ("int", (1, None)),
    "hardware.param_offload": ("bool", None),
    "hardware.optimizer_offload": ("bool", None),
    "hardware.ref_param_offload": ("bool", None),
    "hardware.fsdp_strategy": ("str", ("fsdp", "fsdp2")),
    "hardware.attn_implementation": ("str?", ("sdpa", "eager", "flash_attention_2", "flash_attention_3")),
    "hardware.torch_compile": ("bool", None),
    "hardware.worker_processes": ("int", (0, None)),
    "hardware.dataloader_workers": ("int", (0, None)),
    "hardware.ray_num_cpus": ("int?", (1, None)),
    "logger.backends": ("list", None),
    "run.name": ("str", None),
    "run.project": ("str", None),
    "run.dir": ("str", None),
    "run.seed": ("int", (0, None)),
    "run.epochs": ("int", (1, None)),
    "run.max_steps": ("int?", (1, None)),
    "run.save_every": ("int?", (1, None)),
    "run.val_every": ("int?", (1, None)),
}

# keys a group option may leave out (only the PPO family reads algorithm.reward_fn)
OPTIONAL = {"algorithm.reward_fn"}

_TYPES = {"int": int, "float": (int, float), "str": str, "bool": bool, "list": list}
_SAFE_NAME = re.compile(r"[\w.\-+=@]+")


def _get(tc: dict, key: str) -> Any:
    node: Any = tc
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return KeyError
        node = node[part]
    return node


def check_field(key: str, value: Any, kind: str, rule: Any) -> Problem | None:
    nullable = kind.endswith("?")
    kind = kind.rstrip("?")
    if value is None:
        if nullable:
            return None
        return Problem(f"{key} must be set (it is null).", key=key, hint=f"{key}=VALUE")
    expected = _TYPES[kind]
    if not isinstance(value, expected) or (kind in ("int", "float") and isinstance(value, bool)):
        return Problem(
            f"{key} must be {'a number' if kind == 'float' else 'an ' + kind if kind == 'int' else 'a ' + kind}, "
            f"not {value!r}.",
            key=key,
            hint=f"{key}=VALUE",
        )
    if kind in ("int", "float") and rule:
        lo, hi = rule
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            bounds = f"at least {lo}" if hi is None else f"between {lo} and {hi}"
            return Problem(f"{key} = {value} is out of range: it must be {bounds}.", key=key)
    if kind == "str" and rule and value not in rule:
        return Problem(f"{key} = {value!r} is not one of: {', '.join(rule)}.", key=key, hint=f"{key}={rule[0]}")
    if kind == "list" and rule:
        bad = [v for v in value if v not in rule]
        if bad:
            return Problem(f"{key} has {bad!r}; allowed: {', '.join(rule)}.", key=key)
    return None


def check_values(tc: dict, comp: Composition) -> list[Problem]:
    problems = []
    for key, (kind, rule) in FIELDS.items():
        value = _get(tc, key)
        if value is KeyError and key in OPTIONAL:
            continue
        if value is KeyError:
            problems.append(
                Problem(
                    f"{key} is missing from the composed config.",
                    key=key,
                    hint=f"a {key.split('.')[0]} option must set it (see conf/{key.split('.')[0]}/)",
                )
            )
            continue
        p = check_field(key, value, kind, rule)
        if p:
            problems.append(p)
    name = tc.get("run", {}).get("name")
    if isinstance(name, str) and not _SAFE_NAME.fullmatch(name):
        problems.append(
            Problem(
                f"run.name = {name!r} cannot name a folder (use letters, digits and . _ - + = @).",
                key="run.name",
                hint="run.name=" + re.sub(r"[^\w.\-+=@]+", "-", name).strip("-"),
            )
        )
    if problems:
        return problems

    fmt = tc["algorithm"]["data_format"]
    if fmt not in tc["data"]["formats"]:
        having = [n for n, f in comp.search.options("data").items() if fmt in data_formats(f)]
        problems.append(
            Problem(
                f"data={tc['data']['name']} has no {fmt} format (it has {', '.join(tc['data']['formats'])}); "
                f"algorithm={tc['algorithm']['name']} reads {fmt} data.",
                key="data",
                hint=f"choose data={' or data='.join(having)}" if having else "prepare your own: trainctl data convert",
            )
        )
    return problems


def data_formats(file) -> list[str]:
    """The formats a data option declares, read without composing it."""
    import yaml

    try:
        return list((yaml.safe_load(file.read_text()) or {}).get("formats") or [])
    except (OSError, yaml.YAMLError):
        return []


def all_data_options(search: SearchPath) -> dict[str, list[str]]:
    return {n: data_formats(f) for n, f in search.options("data").items()}
