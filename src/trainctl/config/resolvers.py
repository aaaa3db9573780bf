"""The `tc.*` resolvers the mapping files (conf/mapping/) use to translate trainctl values into backend values."""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import OmegaConf

from trainctl.config import offpolicy

# A mapped value equal to this is dropped: the backend keeps its own default.
UNSET = "__trainctl_unset__"

# The trainer loggers every run has, whatever logger options are chosen: its output (console, kept in logs/) and
# its metrics per step (file: metrics/attempt-N.jsonl, what `trainctl runs` and `ckpt` read). Logger options add
# destinations to these; they never remove the run's own record.
RUN_RECORD_LOGGERS = ("console", "file")
# trainctl's loggers that no TRL `report_to` integration covers (trainctl handles them itself).
_TRAINCTL_ONLY_LOGGERS = set(RUN_RECORD_LOGGERS)


def _opt(value):
    return UNSET if value is None else value


def _or(value, default):
    return default if value is None else value


def _if_null(value, if_null, otherwise):
    return if_null if value is None else otherwise


def _if_eq(value, expected, then):
    """`then` when value == expected, else UNSET (the backend keeps its default): a setting one option needs."""
    return then if value == expected else UNSET


def _choose(flag, then, otherwise):
    """`then` when flag is true, else `otherwise`."""
    return then if flag else otherwise


def _if_ne(value, other, then):
    """`then` when value != other, else UNSET: a setting every option but one needs (offpolicy's, but for off)."""
    return then if value != other else UNSET


def _verl_mode(mode):
    """offpolicy.mode -> verl's trainer.v1.trainer_mode; off leaves verl's default (sync) alone."""
    return UNSET if mode == "off" else offpolicy.VERL_MODES[mode]


def _staleness_threshold(mode, max_staleness):
    """verl's max_off_policy_threshold: the versions a sample may span, its own included (max_staleness + 1: verl's
    replay buffer drops a sample when `global_steps - submitted_step + 1 > threshold`); null: no cap."""
    if mode == "off":
        return UNSET
    return None if max_staleness is None else max_staleness + 1


def _is_threshold(correction, floor, cap):
    found = offpolicy.is_threshold(correction, floor, cap)
    return UNSET if found is None else found


def _split(which, mode, nnodes, gpus_per_node, rollout_gpus, device="cuda"):
    """offpolicy=split's share of the hardware's devices: trainer_nodes, trainer_gpus (the whole hardware for the
    other modes), rollout_nodes, rollout_gpus (UNSET for the other modes: verl's defaults)."""
    if mode != "split":
        return {"trainer_nodes": nnodes, "trainer_gpus": gpus_per_node}.get(which, UNSET)
    layout = offpolicy.split_layout(nnodes, gpus_per_node, rollout_gpus, device)
    (train_nodes, train_gpus), (roll_nodes, roll_gpus) = layout
    return {
        "trainer_nodes": train_nodes,
        "trainer_gpus": train_gpus,
        "rollout_nodes": roll_nodes,
        "rollout_gpus": roll_gpus,
    }[which]


def _checkpoint_engine(which, mode, device):
    """offpolicy=split's checkpoint engine on the hardware's device: backend, module (custom_backend_module) or
    bucket_mb; UNSET for the other modes (and where verl's default is the one)."""
    if mode != "split":
        return UNSET
    backend, module, bucket_mb = offpolicy.checkpoint_engine(device)
    found = {"backend": backend, "module": module, "bucket_mb": bucket_mb}[which]
    return UNSET if found is None else found


def _lora_merge(device, rollout_engine, mode):
    """verl's actor_rollout_ref.model.lora.merge: true where the rollout must get merged full weights, else UNSET
    (verl's default, false: the base once, then the adapters). offpolicy=split: verl's separate_async sends the
    engine's get_per_tensor_param() without its peft_config, which without merge is the base weights alone at every
    sync (the adapters never reach the rollout); vLLM's CPU build: it lacks the adapter loading verl uses."""
    if mode == "split" or (device == "cpu" and rollout_engine == "vllm"):
        return True
    return UNSET


def _plain(node):
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


def _logger_backends(destinations):
    """The trainer's logger names: the run's own record, then each chosen destination (logger=[wandb,mlflow])."""
    names = list(_plain(destinations) or {})
    return [*RUN_RECORD_LOGGERS, *(n for n in names if n not in RUN_RECORD_LOGGERS)]


def _logger_name(destinations):
    return "+".join(_plain(destinations) or {}) or "console"


def _logger_env(destinations):
    env: list[str] = []
    for spec in (_plain(destinations) or {}).values():
        env += [v for v in (spec or {}).get("env") or [] if v not in env]
    return env


def _if_lora(rank, value):
    """`value` when LoRA is on (lora.rank set), else UNSET: with lora=none the backend keeps its own defaults."""
    if rank is None:
        return UNSET
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def _as_list(value):
    """A string as a one-element list (TRL declares lora_target_modules as list[str]; a single entry such as
    all-linear reaches PEFT as that string)."""
    if OmegaConf.is_config(value):
        value = OmegaConf.to_container(value, resolve=True)
    return [value] if isinstance(value, str) else value


# the tool servers trainctl ships (runtime/tools/NAME.py); a stdio server is started by path, so this is a path
# only (nothing of runtime/ is imported here)
BUILTIN_TOOLS = Path(__file__).resolve().parent.parent / "runtime" / "tools"


def _builtin_tool(name):
    """The file of a tool server trainctl ships (conf/tools/calculator.yaml starts it by path)."""
    path = BUILTIN_TOOLS / f"{name}.py"
    if not path.is_file():
        found = sorted(p.stem for p in BUILTIN_TOOLS.glob("*.py") if not p.stem.startswith("_"))
        raise ValueError(f"trainctl ships no tool server {name!r} (it ships: {', '.join(found)})")
    return str(path)


# the reward functions trainctl ships (runtime/rewards/NAME.py), by path likewise
BUILTIN_REWARDS = Path(__file__).resolve().parent.parent / "runtime" / "rewards"


def _builtin_reward(name):
    """The file of a reward function trainctl ships (conf/reward/arith.yaml names it by path)."""
    path = BUILTIN_REWARDS / f"{name}.py"
    if not path.is_file():
        found = sorted(p.stem for p in BUILTIN_REWARDS.glob("*.py") if not p.stem.startswith("_"))
        raise ValueError(f"trainctl ships no reward function {name!r} (it ships: {', '.join(found)})")
    return str(path)


def _python():
    """The Python running trainctl: it has the mcp package the built-in servers need."""
    return sys.executable


def _verifiers_python():
    """verifiers' own interpreter (trainctl.facts.verifiers), or where `trainctl env install verifiers` would put it
    (a plan without it is refused, naming that command, before any server starts)."""
    from trainctl.facts import verifiers
    from trainctl.paths import home_dir

    found = verifiers.interpreter(home_dir())
    return str(found or verifiers.python_of(verifiers.default_venv(home_dir())))


def _verifiers_worker():
    from trainctl.facts import verifiers

    return str(verifiers.WORKER)


def _verifiers_spec(taskset_id, args, path):
    """The worker's SPEC (trainctl.runtime.verifiers_worker): the taskset's module, its config's fields and the
    folders it is imported from (absolute: the server starts wherever the run's workers are)."""
    import json

    def plain(node):
        return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node

    folders = [str(Path(p).expanduser().absolute()) for p in plain(path) or []]
    return json.dumps({"id": taskset_id, "args": plain(args) or {}, "path": folders}, sort_keys=True)


def _report_to(backends):
    rest = [b for b in backends if b not in _TRAINCTL_ONLY_LOGGERS]
    return rest or "none"


RESOLVERS = {
    "tc.opt": _opt,
    "tc.or": _or,
    "tc.if_null": _if_null,
    "tc.if_eq": _if_eq,
    "tc.choose": _choose,
    "tc.if_ne": _if_ne,
    "tc.verl_mode": _verl_mode,
    "tc.staleness_threshold": _staleness_threshold,
    "tc.is_threshold": _is_threshold,
    "tc.split": _split,
    "tc.checkpoint_engine": _checkpoint_engine,
    "tc.lora_merge": _lora_merge,
    "tc.sum": lambda *xs: sum(xs),
    "tc.floordiv": lambda a, b: a // b,
    "tc.eq": lambda a, b: a == b,
    "tc.ne": lambda a, b: a != b,
    "tc.abspath": lambda p: str(Path(p).expanduser().resolve()),
    "tc.report_to": _report_to,
    "tc.logger_backends": _logger_backends,
    "tc.logger_name": _logger_name,
    "tc.logger_env": _logger_env,
    "tc.if_lora": _if_lora,
    "tc.as_list": _as_list,
    "tc.builtin_tool": _builtin_tool,
    "tc.builtin_reward": _builtin_reward,
    "tc.python": _python,
    "tc.verifiers_python": _verifiers_python,
    "tc.verifiers_worker": _verifiers_worker,
    "tc.verifiers_spec": _verifiers_spec,
}


def register() -> None:
    """Make the tc.* resolvers available (idempotent)."""
    for name, fn in RESOLVERS.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
