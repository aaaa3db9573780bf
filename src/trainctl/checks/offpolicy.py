"""Checks of the `offpolicy` group (trainctl.config.offpolicy, issue 56) before anything starts.

verl 0.9.1's validate_config checks none of the `trainer.v1.*` keys: its replay buffer asserts on the staleness
threshold and strategy when the trainer is built, and `separate_async` asserts on five conditions after the cluster
is up (verl/trainer/ppo/v1/trainer_separate_async.py); the legacy trainer (trainer.use_v1=false) ignores every V1 key,
and the rollout correction does nothing, without a word, when the rollout returns no log-probs
(trainer_base._compute_advantage). Each becomes one message here, naming the trainctl key, the numbers and a fix.
Values are read from the built verl config, so a verl key set by hand over the mapping is checked the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainctl.config.offpolicy import VERL_MODES, split_layout
from trainctl.config.origins import COMMAND_LINE
from trainctl.errors import Problem

if TYPE_CHECKING:
    from trainctl.checks.base import Subject

AR = "actor_rollout_ref"
V1 = "trainer.v1"
MAPPING = "conf/mapping/verl_ppo.yaml"


def checks(s: Subject) -> list[Problem]:
    op = s.cfg.offpolicy
    if s.cfg.family != "ppo":
        if op.mode == "off" and op.correction == "none":
            return []
        what = f"offpolicy={op.name}" if op.mode != "off" else f"offpolicy.correction={op.correction}"
        return [
            Problem(
                f"{what} with algorithm={s.cfg.algorithm.name}: off-policy training and its correction are verl's PPO "
                f"family's (its V1 trainer's replay buffer); {s.cfg.algorithm.name} trains on a fixed dataset, "
                "with no rollout to run ahead.",
                key="offpolicy",
                hint="offpolicy=off, or a PPO-family algorithm: algorithm=grpo",
            )
        ]
    problems = _raw_mode(s) + _correction(s)
    if op.mode == "off":
        return problems
    if s.value("trainer.use_v1") is False:
        problems.append(
            Problem(
                f"offpolicy={op.name} with algorithm={s.cfg.algorithm.name}: it runs on verl's legacy trainer "
                "(trainer.use_v1 = false), which has no off-policy modes and ignores every trainer.v1 key.",
                key="offpolicy",
                hint="offpolicy=off, or an algorithm of verl's V1 trainer (algorithm=rloo, grpo, ...)",
            )
        )
        return problems
    problems += _staleness(s)
    if op.mode == "split":
        problems += _split(s)
    return problems


def _raw_mode(s: Subject) -> list[Problem]:
    """`trainer.v1.trainer_mode` set by hand: refused unless it says what offpolicy says (offpolicy owns the mode, so
    that its cap, correction and checks come with it)."""
    key = f"{V1}.trainer_mode"
    if key not in s.built.leaves or s.built.origins.get(key) == MAPPING:
        return []
    value, op = s.built.leaves[key], s.cfg.offpolicy
    if value == VERL_MODES[op.mode]:
        return []
    where = s.built.origins.get(key) or s.comp.origin(f"verl.{key}")
    where = f" (set in {where})" if where and where != COMMAND_LINE else ""
    named = {v: k for k, v in VERL_MODES.items()}.get(value)
    fix = f"offpolicy={named}" if named else "offpolicy=overlap or split"
    return [
        Problem(
            f"{key} = {value}{where} beside offpolicy={op.name}: the offpolicy group says the trainer mode, with its "
            "staleness cap, correction and checks; a mode set by hand would run without them.",
            key=key,
            hint=f"{fix}, and drop {key}",
        )
    ]


def _correction(s: Subject) -> list[Problem]:
    op, problems = s.cfg.offpolicy, []
    if op.is_floor is not None and op.correction != "icepop":
        problems.append(
            Problem(
                f"offpolicy.is_floor = {op.is_floor} with offpolicy.correction = {op.correction}: the lower bound is "
                "icepop's (tis only caps the weights).",
                key="offpolicy.is_floor",
                hint="offpolicy.correction=icepop, or drop offpolicy.is_floor",
            )
        )
    if op.correction == "icepop" and op.is_floor is not None and op.is_cap is not None and op.is_floor >= op.is_cap:
        problems.append(
            Problem(
                f"offpolicy.is_floor = {op.is_floor} is not below offpolicy.is_cap = {op.is_cap}: icepop would zero "
                "every token's weight.",
                key="offpolicy.is_floor",
                hint="offpolicy.is_floor=0.5 offpolicy.is_cap=5",
            )
        )
    corrects = s.value("algorithm.rollout_correction.rollout_is") is not None or s.value(
        "algorithm.rollout_correction.bypass_mode"
    )
    if corrects and s.value(f"{AR}.rollout.calculate_log_probs") is False:
        what = f"offpolicy.correction = {op.correction}" if op.correction != "none" else "algorithm.rollout_correction"
        problems.append(
            Problem(
                f"{what} needs the rollout's log-probs, but {AR}.rollout.calculate_log_probs = false: verl then skips "
                "the correction without a word (it computes the weights only when the batch holds rollout_log_probs).",
                key=f"{AR}.rollout.calculate_log_probs",
                hint=f"drop {AR}.rollout.calculate_log_probs=false (verl's default is true), or "
                "offpolicy.correction=none",
            )
        )
    return problems


def _staleness(s: Subject) -> list[Problem]:
    op, problems = s.cfg.offpolicy, []
    threshold = s.value(f"{V1}.sampler.max_off_policy_threshold")
    strategy = s.value(f"{V1}.sampler.max_off_policy_strategy")
    if strategy not in ("wait", "drop"):
        problems.append(
            Problem(
                f"{V1}.sampler.max_off_policy_strategy = {strategy!r}: verl's replay buffer takes drop or wait.",
                key="offpolicy.on_stale",
                hint="offpolicy.on_stale=wait (or drop)",
            )
        )
    if threshold is not None and (not isinstance(threshold, int) or isinstance(threshold, bool) or threshold < 1):
        problems.append(
            Problem(
                f"offpolicy.max_staleness = {op.max_staleness}: a sample cannot lag fewer than 0 policy versions "
                f"(verl's max_off_policy_threshold, max_staleness + 1 = {threshold}, must be an integer of at least "
                "1: its replay buffer asserts it when the trainer starts).",
                key="offpolicy.max_staleness",
                hint="offpolicy.max_staleness=1 (a sample at most one step behind), or offpolicy=off",
            )
        )
    elif threshold == 1:
        happens = (
            "every sample generated ahead is older than that at the next step and is dropped"
            if strategy == "drop"
            else "training waits at every step for every prompt in flight to finish"
        )
        problems.append(
            Problem(
                f"offpolicy.max_staleness = 0 with offpolicy={op.name}: every sample must come from the current "
                f"policy, so {happens}: on-policy training that generates more.",
                key="offpolicy.max_staleness",
                hint="offpolicy=off (on-policy), or offpolicy.max_staleness=1",
            )
        )
    ahead = s.value(f"{V1}.{VERL_MODES[op.mode]}.num_warmup_batches")
    if isinstance(ahead, int) and ahead <= 0 and op.mode == "overlap":
        problems.append(
            Problem(
                f"offpolicy.prefetch_batches = {ahead} with offpolicy=overlap: nothing is generated ahead, so each "
                "step waits for its whole batch, as offpolicy=off does.",
                key="offpolicy.prefetch_batches",
                severity="warning",
                hint="offpolicy.prefetch_batches=1, or offpolicy=off",
            )
        )
    elif isinstance(ahead, int) and isinstance(threshold, int) and strategy == "drop" and ahead > threshold - 1:
        problems.append(
            Problem(
                f"offpolicy.prefetch_batches = {ahead} runs generation {ahead} steps ahead, past "
                f"offpolicy.max_staleness = {threshold - 1} with on_stale=drop: the prompts queued furthest ahead pass "
                "the cap before their turn, and are dropped and generated again.",
                key="offpolicy.prefetch_batches",
                severity="warning",
                hint=f"offpolicy.prefetch_batches={threshold - 1}, offpolicy.max_staleness={ahead}, or "
                "offpolicy.on_stale=wait",
            )
        )
    return problems


def _split(s: Subject) -> list[Problem]:
    """verl's separate_async asserts (trainer_separate_async.py __init__), what it gets wrong without a word (LoRA
    adapters without merge), and what this machine cannot host."""
    op, hw, problems = s.cfg.offpolicy, s.cfg.hardware, []
    rollout = s.value(f"{AR}.rollout.name")
    if hw.device == "cpu" and rollout != "hf":
        problems.append(
            Problem(
                f"offpolicy=split on hardware={hw.name} with {AR}.rollout.name = {rollout}: on cpu the rollout pool "
                "gets its weights through trainctl's gloo checkpoint engine, which has fed trainctl's hf rollout only "
                "(vLLM's CPU build takes them through a shared-memory bucket sender this machine has not run).",
                key="hardware.rollout_engine",
                hint="hardware.rollout_engine=hf, or offpolicy=overlap",
            )
        )
    lora = s.value(f"{AR}.model.lora_rank")
    if isinstance(lora, int) and lora > 0 and s.value(f"{AR}.model.lora.merge") is not True:
        problems.append(
            Problem(
                f"offpolicy=split with lora (rank {lora}) and {AR}.model.lora.merge = false: verl's separate_async "
                "sends the engine's weights without their peft_config, which without merge are the base weights "
                "alone at every sync: the rollout would never sample from the trained adapters.",
                key=f"{AR}.model.lora.merge",
                hint=f"drop {AR}.model.lora.merge=false (offpolicy=split merges the adapters into each sync), or "
                "lora=none",
            )
        )
    (train_nodes, train_gpus), (roll_nodes, roll_gpus) = split_layout(
        hw.nnodes, hw.gpus_per_node, op.rollout_gpus, hw.device
    )
    total = hw.nnodes * hw.gpus_per_node
    wanted = op.rollout_gpus if op.rollout_gpus is not None else total // 2
    if hw.nnodes > 1 and wanted % hw.gpus_per_node:
        problems.append(
            Problem(
                f"offpolicy.rollout_gpus = {wanted} on hardware={hw.name} ({hw.nnodes} nodes x {hw.gpus_per_node}): "
                "on several nodes the rollout pool takes whole nodes.",
                key="offpolicy.rollout_gpus",
                hint=f"offpolicy.rollout_gpus={max(1, wanted // hw.gpus_per_node) * hw.gpus_per_node}",
            )
        )
    elif min(train_nodes * train_gpus, roll_nodes * roll_gpus) < 1:
        problems.append(
            Problem(
                f"offpolicy=split on hardware={hw.name} ({total} devices): rollout {roll_nodes * roll_gpus}, training "
                f"{train_nodes * train_gpus}; each side needs at least one device (verl asserts rollout nnodes and "
                "n_gpus_per_node > 0).",
                key="offpolicy.rollout_gpus",
                hint="offpolicy=overlap on one device, or hardware with more: hardware=8gpu offpolicy.rollout_gpus=4"
                if total < 2
                else f"offpolicy.rollout_gpus={total // 2}",
            )
        )
    problems += _cpu_room(s, train_gpus, roll_gpus)
    for key in (f"{AR}.rollout.nnodes", f"{AR}.rollout.n_gpus_per_node"):
        value = s.value(key)
        if isinstance(value, int) and value < 1 and s.built.origins.get(key) != MAPPING:
            problems.append(
                Problem(
                    f"{key} = {value} with offpolicy=split: verl asserts it is above 0.",
                    key=key,
                    hint=f"drop {key} (offpolicy.rollout_gpus says the rollout pool's devices)",
                )
            )
    per_step = s.value("data.train_batch_size")
    mini = s.value(f"{AR}.actor.ppo_mini_batch_size")
    sync = s.value(f"{V1}.separate_async.parameter_sync_step")
    if all(isinstance(v, int) for v in (per_step, mini, sync)) and per_step != sync * mini:
        fix = (
            f"offpolicy.sync_every={per_step // mini}"
            if mini and per_step % mini == 0
            else f"data.train_batch_size={sync * mini}"
        )
        problems.append(
            Problem(
                f"data.train_batch_size = {per_step} is not offpolicy.sync_every x ppo_mini_batch_size = {sync} x "
                f"{mini} = {sync * mini}: verl's separate_async trains one mini-batch per update and syncs weights "
                "after sync_every of them (it asserts this at start).",
                key="offpolicy.sync_every",
                hint=f"{fix}, or offpolicy.sync_every=null (the quotient)",
            )
        )
    backend = s.value(f"{AR}.rollout.checkpoint_engine.backend")
    if backend == "naive":
        problems.append(
            Problem(
                f"{AR}.rollout.checkpoint_engine.backend = naive with offpolicy=split: the naive engine only reaches "
                "rollout servers in the trainer's own processes; verl asserts another for a pool of its own.",
                key=f"{AR}.rollout.checkpoint_engine.backend",
                hint=f"drop {AR}.rollout.checkpoint_engine.backend (offpolicy=split sets nccl, or gloo on cpu)",
            )
        )
    if s.value("reward.reward_model.enable") and not s.value("reward.reward_model.enable_resource_pool"):
        problems.append(
            Problem(
                "reward=model with offpolicy=split: the reward model shares the trainer's devices "
                "(reward.reward_model.enable_resource_pool = false), but the rollout pool never pauses to free them; "
                "verl asserts a reward model on devices of its own.",
                key="reward.reward_model.enable_resource_pool",
                hint="reward.reward_model.enable_resource_pool=true reward.reward_model.n_gpus_per_node=1, or "
                "offpolicy=overlap",
            )
        )
    return problems


def _cpu_room(s: Subject, train: int, rollout: int) -> list[Problem]:
    """On one cpu node each training and rollout process holds one of the Ray CPUs the run starts Ray with
    (hardware.ray_num_cpus), beside TransferQueue's actors: verl creates the rollout's pool last, and with too few
    CPUs left it fails there, after the trainer has loaded."""
    from trainctl.launchers.capacity import beside

    hw = s.cfg.hardware
    if hw.device != "cpu" or hw.nnodes != 1 or hw.launcher != "local" or not hw.ray_num_cpus:
        return []
    held = beside(s.cfg)
    need = train + rollout + held
    if need <= hw.ray_num_cpus:
        return []
    return [
        Problem(
            f"offpolicy=split on hardware={hw.name}: {train} training + {rollout} rollout process(es) + verl's "
            f"TransferQueue actors ({held} CPUs) hold {need} Ray CPUs, and hardware.ray_num_cpus = {hw.ray_num_cpus}.",
            key="hardware.ray_num_cpus",
            hint=f"hardware.ray_num_cpus={need}, or fewer rollout processes: offpolicy.rollout_gpus=1",
        )
    ]
