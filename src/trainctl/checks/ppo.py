"""Checks for the PPO family (verl main_ppo) that verl itself leaves until workers are running on the cluster."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from trainctl.checks import prometheus, vllm
from trainctl.checks.arith import divisors_near, fix, neighbours, step_for
from trainctl.checks.base import Number
from trainctl.checks.common import check_logger_names, check_verl_device, micro_fix_key, nodes_text
from trainctl.errors import Problem
from trainctl.facts import verl as facts

if TYPE_CHECKING:
    from trainctl.checks.base import Subject

AR = "actor_rollout_ref"


def _choice(s: Subject, key: str, allowed: tuple[str, ...], what: str, hint_extra: str = "") -> Problem | None:
    value = s.value(key)
    if value in allowed:
        return None
    from trainctl.suggest import closest

    guess = closest(str(value), allowed)
    article = "an" if what[0] in "aeiou" else "a"
    return Problem(
        f"{key} = {value!r} is not {article} {what} verl {facts.VERL_VERSION} knows.",
        key=key,
        details=[f"Did you mean '{guess[0]}'?"] if guess else [f"Known: {', '.join(allowed)}"],
        hint=f"{key}={guess[0] if guess else allowed[0]}" + hint_extra,
    )


def registries(s: Subject) -> list[Problem]:
    """Names verl looks up only inside Ray workers, long after the cluster started."""
    problems = [
        _choice(s, "algorithm.adv_estimator", facts.ADV_ESTIMATORS, "advantage estimator"),
        _choice(s, f"{AR}.actor.policy_loss.loss_mode", facts.POLICY_LOSSES, "policy loss"),
        _choice(s, "algorithm.kl_ctrl.type", facts.KL_CONTROLLERS, "KL controller"),
        _choice(s, f"{AR}.actor.loss_agg_mode", facts.LOSS_AGG_MODES, "loss aggregation mode"),
    ]
    for key in ("algorithm.kl_penalty", f"{AR}.actor.kl_loss_type"):
        value = str(s.value(key))
        if value.removesuffix("+") not in facts.KL_PENALTIES:
            problems.append(
                Problem(
                    f"{key} = {value!r} is not a KL estimator verl knows.",
                    key=key,
                    details=[
                        f"Known: {', '.join(facts.KL_PENALTIES)} (a trailing + selects the straight-through form)"
                    ],
                    hint=f"{key}=low_var_kl",
                )
            )
    if s.value("reward.reward_manager.source") == "register":
        problems.append(_choice(s, "reward.reward_manager.name", facts.REWARD_MANAGERS, "reward manager"))
    rollouts = (*facts.VERL_ROLLOUTS, *facts.TRAINCTL_ROLLOUTS)
    problems.append(
        _choice(s, f"{AR}.rollout.name", rollouts, "rollout engine", " (or choose it with hardware.rollout_engine)")
    )
    problems.extend(check_logger_names(s, "trainer.logger"))
    if s.value("algorithm.adv_estimator") == "remax" and s.value("trainer.use_v1") is True:
        problems.append(
            Problem(
                "algorithm.adv_estimator = remax needs verl's legacy trainer, but trainer.use_v1 = true.",
                key="trainer.use_v1",
                details=[
                    f"verl {facts.VERL_VERSION}'s v1 trainer never computes the greedy baseline ReMax needs "
                    "(compute_remax_outcome_advantage() missing 'reward_baselines')"
                ],
                hint="trainer.use_v1=false",
            )
        )
    return [p for p in problems if p]


def rollout_fit(s: Subject) -> list[Problem]:
    problems = []
    name = s.value(f"{AR}.rollout.name")
    device = s.value("trainer.device")
    if device == "cpu" and name == "vllm":
        # verl's own vLLM rollout on vLLM's CPU build (trainctl.runtime.vllm_cpu)
        problems += vllm.cpu_problems(Path(s.cfg.model.path), s.cfg.model.arch, model=f"model={s.cfg.model.name}")
        problems += vllm.cpu_rollout_problems(s.value)
    elif device == "cpu" and name in facts.VERL_ROLLOUTS:
        problems.append(
            Problem(
                f"{AR}.rollout.name = {name} needs a GPU, but trainer.device = cpu.",
                key=f"{AR}.rollout.name",
                hint="hardware.rollout_engine=hf (trainctl's transformers rollout runs on CPU), or vllm (vLLM's CPU "
                "build)",
            )
        )
    elif device != "cpu" and name in facts.TRAINCTL_ROLLOUTS:
        problems.append(
            Problem(
                f"{AR}.rollout.name = {name} samples with transformers on CPU: far slower than vllm on a GPU.",
                key=f"{AR}.rollout.name",
                hint="hardware.rollout_engine=vllm",
                severity="warning",
            )
        )
    tp = s.value(f"{AR}.rollout.tensor_model_parallel_size")
    per_node = s.value("trainer.n_gpus_per_node")
    if isinstance(tp, int) and isinstance(per_node, int) and (tp > per_node or per_node % tp):
        problems.append(
            Problem(
                "The rollout's tensor-parallel group does not fit a node:",
                key=f"{AR}.rollout.tensor_model_parallel_size",
                details=[
                    f"{AR}.rollout.tensor_model_parallel_size = {tp}; {per_node} GPUs per node; "
                    + (f"{tp} > {per_node}" if tp > per_node else f"{per_node} % {tp} = {per_node % tp}")
                ],
                hint=fix("hardware.rollout_tp", divisors_near(per_node, tp)),
            )
        )
    return problems


def _mini_micro(s: Subject, role: str, mini_key: str, micro_key: str, dyn_key: str, P: int, n: int, dp: int) -> list:
    problems = []
    M = s.value(mini_key)
    u = s.value(micro_key)
    dyn = bool(s.value(dyn_key))
    if not isinstance(M, int) or M < 1:
        return [Problem(f"{mini_key} must be a positive integer, not {M!r}.", key=mini_key)]
    if M > P:
        problems.append(
            Problem(
                f"A {role} update needs more prompts than a step has:",
                key=mini_key,
                details=[f"{mini_key} = {M} > data.train_batch_size = {P}"],
                hint=fix(mini_key, [d for d in divisors_near(P, M) if d <= P][-1:] or [P]),
            )
        )
        return problems
    good_mini = [d for d in range(1, P + 1) if P % d == 0 and (d * n) % dp == 0]
    if P % M:
        problems.append(
            Problem(
                f"Each step's prompts do not split into whole {role} updates:",
                key=mini_key,
                details=[f"data.train_batch_size % {mini_key} = {P} % {M} = {P % M}"],
                hint=fix(mini_key, _nearest(good_mini, M)) if good_mini else None,
            )
        )
    elif (M * n) % dp:
        problems.append(
            Problem(
                f"A {role} update's sequences do not divide across data-parallel ranks:",
                key=mini_key,
                details=[f"{mini_key} x rollout.n = {M} x {n} = {M * n}; {dp} ranks; {M * n} % {dp} = {(M * n) % dp}"],
                hint=fix(mini_key, _nearest(good_mini, M)) if good_mini else None,
            )
        )
    elif not dyn:
        per_gpu = M * n // dp
        if not isinstance(u, int) or u < 1:
            problems.append(
                Problem(
                    f"{micro_key} must be set when {dyn_key} is false (it is {u!r}).",
                    key=micro_key,
                    hint=f"{micro_key}={max(1, min(per_gpu, 4))} (or hardware.micro_batch_size_per_gpu)",
                )
            )
        elif per_gpu % u:
            problems.append(
                Problem(
                    f"A {role} update's per-GPU sequences do not split into micro-batches:",
                    key=micro_key,
                    details=[
                        f"{mini_key} x rollout.n / ranks = {M} x {n} / {dp} = {per_gpu}; "
                        f"{per_gpu} % {micro_key} ({u}) = {per_gpu % u}"
                    ],
                    hint=fix(micro_fix_key(s, micro_key), divisors_near(per_gpu, u)),
                )
            )
    return problems


def _nearest(candidates: list[int], target: int) -> list[int]:
    below = [c for c in candidates if c < target]
    above = [c for c in candidates if c > target]
    return [*below[-1:], *above[:1]]


def batch(s: Subject) -> list[Problem]:
    """Batch arithmetic, whatever use_dynamic_bsz says (verl checks it only without dynamic batching)."""
    P = s.value("data.train_batch_size")
    n = s.value(f"{AR}.rollout.n")
    nodes, per_node = s.value("trainer.nnodes"), s.value("trainer.n_gpus_per_node")
    for key, v in (("data.train_batch_size", P), (f"{AR}.rollout.n", n)):
        if not isinstance(v, int) or v < 1:
            return [Problem(f"{key} must be a positive integer, not {v!r}.", key=key)]
    world = nodes * per_node
    sp = s.value(f"{AR}.actor.ulysses_sequence_parallel_size") or 1
    if world % sp:
        return [
            Problem(
                "Sequence parallelism does not divide the GPUs:",
                key=f"{AR}.actor.ulysses_sequence_parallel_size",
                details=[
                    f"{nodes_text(nodes)} x {per_node} GPUs = {world}; "
                    f"{world} % ulysses_sequence_parallel_size ({sp}) = {world % sp}"
                ],
                hint=fix(f"{AR}.actor.ulysses_sequence_parallel_size", divisors_near(world, sp)),
            )
        ]
    dp = world // sp
    problems = []
    S = P * n
    if S % dp:
        problems.append(
            Problem(
                "Sequences per step do not divide across data-parallel ranks:",
                key="data.train_batch_size",
                details=[
                    f"data.train_batch_size x rollout.n = {P} x {n} = {S}; "
                    f"{nodes_text(nodes)} x {per_node} GPUs = {world} ranks"
                    + (f" / sp {sp} = {dp}" if sp > 1 else "")
                    + f"; {S} % {dp} = {S % dp}"
                ],
                hint=fix("data.train_batch_size", neighbours(P, step_for(n, dp))),
            )
        )
    problems += _mini_micro(
        s,
        "policy",
        f"{AR}.actor.ppo_mini_batch_size",
        f"{AR}.actor.ppo_micro_batch_size_per_gpu",
        f"{AR}.actor.use_dynamic_bsz",
        P,
        n,
        dp,
    )
    if s.value("algorithm.adv_estimator") == "gae":
        problems += _mini_micro(
            s,
            "critic",
            "critic.ppo_mini_batch_size",
            "critic.ppo_micro_batch_size_per_gpu",
            "critic.use_dynamic_bsz",
            P,
            n,
            dp,
        )
    est = s.value("algorithm.adv_estimator")
    if est in facts.GROUP_ESTIMATORS and n < 2:
        problems.append(
            Problem(
                f"algorithm.adv_estimator = {est} compares the samples of each prompt, but {AR}.rollout.n = {n}: "
                "every advantage would be 0.",
                key=f"{AR}.rollout.n",
                hint=f"{AR}.rollout.n=5",
            )
        )
    rows = s.rows("train")
    if rows is not None and rows < P:
        problems.append(
            Problem(
                f"The training file has fewer rows than one step takes: {rows} rows < data.train_batch_size = {P} "
                "(an epoch would have no steps).",
                key="data.train_batch_size",
                hint=f"data.train_batch_size={max(1, rows // step_for(n, dp) * step_for(n, dp)) or rows}",
            )
        )
    return problems


def lengths(s: Subject) -> list[Problem]:
    problems = []
    p, r = s.value("data.max_prompt_length"), s.value("data.max_response_length")
    ctx = s.cfg.model.context_length
    if isinstance(p, int) and isinstance(r, int) and p + r > ctx:
        problems.append(
            Problem(
                "Prompt and response budgets exceed the model's context:",
                key="data.max_response_length",
                details=[
                    f"data.max_prompt_length + data.max_response_length = {p} + {r} = {p + r} "
                    f"> {ctx} (model.context_length of model={s.cfg.model.name})"
                ],
                hint=f"data.max_response_length={max(1, ctx - p)}",
            )
        )
    max_len = s.value(f"{AR}.rollout.max_model_len")
    if isinstance(max_len, int) and isinstance(p, int) and isinstance(r, int) and max_len < p + r:
        problems.append(
            Problem(
                f"{AR}.rollout.max_model_len = {max_len} is shorter than a prompt and its response ({p} + {r}).",
                key=f"{AR}.rollout.max_model_len",
                hint=f"{AR}.rollout.max_model_len={p + r}",
            )
        )
    if s.value("reward.reward_manager.name") == "dapo":
        overlong = s.value("reward.reward_kwargs.overlong_buffer_cfg") or {}
        max_resp = s.value("reward.reward_kwargs.max_resp_len")
        if overlong.get("enable"):
            length = overlong.get("len")
            if max_resp is None:
                problems.append(
                    Problem(
                        "DAPO's overlong penalty is on but reward.reward_kwargs.max_resp_len is not set.",
                        key="reward.reward_kwargs.max_resp_len",
                        hint=f"+reward.reward_kwargs.max_resp_len={r}",
                    )
                )
            elif not isinstance(length, int) or length <= 0 or length > max_resp:
                problems.append(
                    Problem(
                        "DAPO's overlong buffer must be positive and fit in the response budget:",
                        key="reward.reward_kwargs.overlong_buffer_cfg.len",
                        details=[f"overlong_buffer_cfg.len = {length}; max_resp_len = {max_resp}"],
                        hint=f"reward.reward_kwargs.overlong_buffer_cfg.len={max(1, max_resp // 4)}",
                    )
                )
    return problems


def legacy(s: Subject) -> list[Problem]:
    """Keys main_ppo accepts and silently ignores."""
    problems = []
    for path, value in s.built.leaves.items():
        for old, new in facts.LEGACY_REWARD_KEYS.items():
            if (path == old or path.startswith(old + ".")) and value is not None:
                target = new + path[len(old) :]
                problems.append(
                    Problem(
                        f"{path} is accepted but silently ignored by verl {facts.VERL_VERSION}'s main_ppo.",
                        key=path,
                        hint=f"use {target}=" + str(value) if not isinstance(value, dict) else f"use {target}",
                    )
                )
                break
    return problems


def reward_coverage(s: Subject) -> list[Problem]:
    """Every RL row's data_source needs a scorer (verl issue #3450), unless the reward kind (a function, a reward
    model, a judge) or a custom reward function set by hand scores every row."""
    from trainctl.backends.rewards import kind_of

    if kind_of(s.cfg).scores_every_row or s.value("reward.custom_reward_function.path"):
        return []
    if s.value("reward.reward_model.enable") is True:
        return []  # verl's reward-model servers, set by hand: the model scores every row
    source = s.cfg.data.data_source
    if source in facts.SCORED_DATA_SOURCES or str(source).startswith(facts.SCORED_DATA_SOURCE_PREFIXES):
        return []
    return [
        Problem(
            f"data.data_source = {source!r} has no built-in reward function in verl, and no custom one is set.",
            key="reward",
            hint="reward=fn reward.fn=path/to/reward.py:compute_score (or a data_source verl scores, e.g. "
            "openai/gsm8k; or reward=model / reward=judge)",
        )
    ]


def checks(s: Subject) -> list[Problem]:
    return [
        *registries(s),
        *rollout_fit(s),
        *batch(s),
        *lengths(s),
        *legacy(s),
        *reward_coverage(s),
        *check_verl_device(s, f"{AR}.actor.strategy", f"{AR}.model.override_config.attn_implementation"),
        *prometheus.checks(s),
    ]


def numbers(s: Subject) -> list[Number]:
    P, n = s.value("data.train_batch_size"), s.value(f"{AR}.rollout.n")
    nodes, per_node = s.value("trainer.nnodes"), s.value("trainer.n_gpus_per_node")
    world = nodes * per_node
    sp = s.value(f"{AR}.actor.ulysses_sequence_parallel_size") or 1
    dp = max(1, world // sp)
    M = s.value(f"{AR}.actor.ppo_mini_batch_size")
    u = s.value(f"{AR}.actor.ppo_micro_batch_size_per_gpu")
    epochs = s.value(f"{AR}.actor.ppo_epochs") or 1
    tp = s.value(f"{AR}.rollout.tensor_model_parallel_size")
    out = [
        Number("prompts per step", P, "data.train_batch_size"),
        Number("sequences per step", P * n, f"{P} prompts x rollout.n {n}"),
        Number("data-parallel ranks", dp, f"{nodes_text(nodes)} x {per_node}" + (f" / sp {sp}" if sp > 1 else "")),
        Number("sequences per rank per step", P * n // dp, f"{P * n} / {dp}"),
        Number(
            "policy updates per step",
            P // M * epochs if M else "?",
            f"{P} / ppo_mini_batch_size {M} x ppo_epochs {epochs}",
        ),
        Number("sequences per GPU per update", M * n // dp if M else "?", f"{M} x {n} / {dp}"),
    ]
    if s.value(f"{AR}.actor.use_dynamic_bsz"):
        tokens = s.value(f"{AR}.actor.ppo_max_token_len_per_gpu")
        out.append(Number("micro-batch per GPU", f"dynamic, <= {tokens} tokens", "use_dynamic_bsz"))
    elif isinstance(u, int) and u > 0 and M:
        out.append(Number("micro-batch per GPU", u, "ppo_micro_batch_size_per_gpu"))
        out.append(Number("gradient accumulation steps", M * n // dp // u, f"{M * n // dp} / {u}"))
    if isinstance(tp, int) and tp > 0:
        out.append(Number("rollout replicas", world // tp, f"{world} GPUs / tensor parallel {tp}"))
    rows = s.rows("train")
    if rows is not None and P:
        steps = rows // P
        total = s.value("trainer.total_training_steps") or steps * s.value("trainer.total_epochs")
        out.append(Number("steps per epoch", steps, f"{rows} rows // {P} (last partial batch dropped)"))
        out.append(
            Number(
                "total steps",
                total,
                "trainer.total_training_steps"
                if s.value("trainer.total_training_steps")
                else f"{steps} x {s.value('trainer.total_epochs')} epochs",
            )
        )
    return out
