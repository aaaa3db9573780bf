"""The `offpolicy` section (issue 56): off-policy (asynchronous) RL on verl 0.9.1's V1 trainer, in the terms the
RL-first trainers use (a staleness cap of k policy versions, what happens past it, a correction for the lag).

offpolicy=off is verl's `sync` trainer (today's behaviour), overlap its `colocate_async`, split its
`separate_async`. conf/mapping/verl_ppo.yaml says where each key lands; trainctl.checks.offpolicy refuses, before
anything starts, every combination verl asserts on (or silently ignores) at run time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from trainctl.config.fields import opt

# offpolicy.mode -> verl's trainer.v1.trainer_mode
VERL_MODES = {"off": "sync", "overlap": "colocate_async", "split": "separate_async"}
# the importance-weight bounds of verl's presets (RolloutCorrectionConfig.decoupled_token_is, decoupled_token_icepop)
TIS_CAP = 2.0
ICEPOP_BOUNDS = (0.5, 5.0)


@dataclass
class Offpolicy:
    """Generation running ahead of training by a bounded number of policy versions (PPO family, verl's V1 trainer);
    off: every sample comes from the policy it trains (verl's sync trainer)."""

    name: str = opt("the offpolicy option's name (offpolicy=NAME)", "off")
    mode: Literal["off", "overlap", "split"] = opt(
        "off (verl's sync trainer), overlap (colocate_async: the next steps' prompts are generated ahead on the same "
        "devices; unfinished ones are aborted at each weight sync and resumed on the new weights), or split "
        "(separate_async: a rollout pool of its own generates all the time; weights are sent to it every step)",
        "off",
    )
    max_staleness: int | None = opt(
        "policy versions a sample may lag behind the policy it trains, counted from the step its prompt was "
        "submitted, queue time included (verl's trainer.v1.sampler.max_off_policy_threshold is this + 1); null: no "
        "cap",
        1,
    )
    on_stale: Literal["wait", "drop"] = opt(
        "a sample about to pass the cap: wait (training waits until it finishes, nothing is thrown away) or drop "
        "(it is discarded and its prompt generated anew, which biases toward short responses)",
        "wait",
    )
    # whole batches: verl takes fractions too, but trainctl's type check reads its YAML's default (1) as an integer
    prefetch_batches: int = opt(
        "batches of prompts submitted ahead when training starts, beyond each step's own: how far generation runs "
        "ahead, and so the staleness a sample settles at (verl's num_warmup_batches)",
        1,
        ge=0,
    )
    correction: Literal["none", "tis", "icepop"] = opt(
        "how the loss corrects for the lag (verl's algorithm.rollout_correction, per token): tis (truncated "
        "importance sampling: weights capped at is_cap), icepop (weights below is_floor or above is_cap zeroed), or "
        "none",
        "none",
    )
    is_cap: float | None = opt(
        f"the importance weights' upper bound (null: {TIS_CAP:g} for tis, {ICEPOP_BOUNDS[1]:g} for icepop)", gt=1
    )
    is_floor: float | None = opt(
        f"icepop's lower bound: tokens whose weight is below it are zeroed (null: {ICEPOP_BOUNDS[0]:g})", gt=0, lt=1
    )
    sync_every: int | None = opt(
        "split: policy updates between weight syncs (verl's parameter_sync_step); verl requires data.train_batch_size "
        "= sync_every x actor_rollout_ref.actor.ppo_mini_batch_size (null: that quotient)",
        ge=1,
    )
    rollout_gpus: int | None = opt(
        "split: devices that only generate, taken from the hardware option's: on one node that many of its GPUs, on "
        "several whole nodes (a multiple of gpus_per_node); training keeps the rest (null: half). On one cpu node, "
        "rollout processes beside the training ones (null: 1)",
        ge=1,
    )


def split_layout(
    nnodes: int, gpus_per_node: int, rollout_gpus: int | None, device: str = "cuda"
) -> tuple[tuple[int, int], tuple[int, int]]:
    """((training nodes, devices per node), (rollout nodes, devices per node)) of offpolicy=split on the hardware's
    nodes; the numbers may be impossible (0 or fewer devices left): trainctl.checks.offpolicy says so.

    On one cpu node a "device" is a process (one Ray CPU) on cores every process shares: the rollout's processes
    come beside the training's (null: one) instead of out of them. On several nodes the rollout takes whole nodes,
    on cpu as on GPUs."""
    if device == "cpu" and nnodes == 1:
        return (1, gpus_per_node), (1, rollout_gpus if rollout_gpus is not None else 1)
    wanted = rollout_gpus if rollout_gpus is not None else nnodes * gpus_per_node // 2
    if nnodes == 1:
        return (1, gpus_per_node - wanted), (1, wanted)
    nodes = wanted // gpus_per_node
    return (nnodes - nodes, gpus_per_node), (nodes, gpus_per_node)


def checkpoint_engine(device: str) -> tuple[str, str | None, int | None]:
    """offpolicy=split's checkpoint engine on a device: (verl's checkpoint_engine.backend, the module verl imports to
    register it (custom_backend_module), its bucket size in MB (None: verl's 2048)). On GPUs verl's NCCL engine; on
    cpu trainctl's gloo one (trainctl.runtime.cpu_checkpoint_engine: verl's other engines need CUDA or an NPU), in
    buckets of 64 MB: each is a copy in host memory on both sides, and smaller buckets overlap gathering and sending
    (SmolLM2-135M's 513 MB: 1.35 s in 64 MB buckets, 1.66 s in 256 MB)."""
    if device == "cpu":
        return CPU_CHECKPOINT_ENGINE
    return "nccl", None, None


CPU_CHECKPOINT_ENGINE = ("gloo", "trainctl.runtime.cpu_checkpoint_engine", 64)


def is_threshold(correction: str, floor: float | None, cap: float | None) -> float | str | None:
    """verl's rollout_is_threshold for a correction: a float caps the weights (TIS), "lower_upper" zeroes those
    outside (IcePop); None for no correction."""
    if correction == "tis":
        return TIS_CAP if cap is None else cap
    if correction == "icepop":
        lo, hi = ICEPOP_BOUNDS
        return f"{lo if floor is None else floor}_{hi if cap is None else cap}"
    return None
