"""Problems worth one clear line while a run trains: non-finite losses, gradient spikes, reward collapse, steps that
learn nothing because every sample got the same reward, running out of memory. Each comes with a hint."""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass

from trainctl.facts.trl import TRAINERS

GRAD_NORMS = ("train/grad_norm", "actor/grad_norm", "critic/grad_norm")
# a gradient norm this many times the recent median is a spike (and above this floor: tiny norms jitter)
SPIKE_FACTOR = 10.0
SPIKE_FLOOR = 1.0
# the key to clip gradients with, per family (every TRL trainer's are TrainingArguments')
CLIP_KEY = {"sft": "optim.clip_grad", "ppo": "actor_rollout_ref.actor.optim.clip_grad"} | dict.fromkeys(
    TRAINERS, "max_grad_norm"
)
LR_KEY = {"sft": "optim.lr", "ppo": "actor_rollout_ref.actor.optim.lr"} | dict.fromkeys(TRAINERS, "learning_rate")


# verl's gap between the rollout's and the trainer's probability of each sampled token (verl.utils.debug.metrics,
# logged when the rollout returns log-probs: both trainctl's CPU rollout and vLLM do): the mean absolute difference
ROLLOUT_GAP = "training/rollout_probs_diff_mean"
# Above this the rollout samples from a policy the trainer does not hold (issue 43's bound). Measured on 2 cores, the
# tiny model, fp32 trainer: trainctl's hf rollout 3e-10 to 9e-9 a step; vLLM's CPU build 3.0e-4 to 4.4e-4 (GRPO, its
# rollout in fp32 or bf16 alike: a random model's near-flat distributions hide the precision) and 8e-6 to 1e-5 (the
# agent recipe on tiny-tools). On GPUs a bf16 vLLM rollout against an FSDP trainer was reported at 4e-3 before any fix
# (verl-omni #637); RL collapsing with the gap growing is verl #2996.
ROLLOUT_GAP_ALERT = 0.01
# ... or when it grows this many times over its own median of the run's earlier steps (and above a floor of noise)
ROLLOUT_GAP_GROWTH = 5.0
ROLLOUT_GAP_FLOOR = 0.002

# offpolicy=...: verl's count of the samples its replay buffer dropped as too stale at a step (on_stale=drop), and
# trainctl's share of a step the trainer waited for its batch (trainctl.runtime.offpolicy_metrics)
EVICTED = "training/off_policy/evicted_samples"
TRAINER_WAIT = "offpolicy/trainer_wait"
# Above this share (the mean of the last 4 steps) generation, not training, bounds the step: what running ahead should
# hide. Measured on 2 cores, the tiny GRPO recipe: 0.43-0.48 at every step in sync (the trainer waits for each batch);
# with offpolicy=overlap 0.01 and 0.5-0.6 in turn from step 2 on (the rollout pauses while the trainer trains, so
# every other batch is generated after the update: verl's colocate_async), 0.29-0.30 over 4 steps
TRAINER_WAIT_WINDOW = 4
TRAINER_WAIT_ALERT = 0.4

# what raises each kind of alert, in words (the generated reference lists them: trainctl.docsgen)
KINDS: dict[str, str] = {
    "nonfinite": "a loss or a gradient norm is NaN or infinite at a step, or the trainer printed `grad_norm is not "
    "finite` (it skipped the update)",
    "grad_spike": f"a gradient norm ({', '.join(GRAD_NORMS)}) above {SPIKE_FLOOR:g} and more than {SPIKE_FACTOR:g} "
    "times its median over the last 20 steps before it (3 at least)",
    "same_reward": "PPO family: every sample of the step got the same reward, so the group-relative advantages are "
    "all zero and the step learns nothing (critic/advantages, else critic/score min = max)",
    "rollout_gap": f'PPO family: {ROLLOUT_GAP} (the live view\'s "rollout gap") above {ROLLOUT_GAP_ALERT:g}, or '
    f"above {ROLLOUT_GAP_FLOOR:g} and more than {ROLLOUT_GAP_GROWTH:g} times its median of the earlier steps (3 at "
    "least)",
    "reward_collapse": "PPO family: the mean reward (critic/score/mean) over the last 3 steps fell by more than half "
    "of its best 3-step mean (when that best is above 0.05), from the 6th step on",
    "stale_drops": f"offpolicy=...: verl dropped samples as too stale at a step ({EVICTED} above 0: "
    "offpolicy.on_stale=drop)",
    "trainer_wait": f"offpolicy=...: the trainer waited for its batch more than {TRAINER_WAIT_ALERT:g} of each step "
    f"({TRAINER_WAIT}, the mean of the last {TRAINER_WAIT_WINDOW} steps, from the 2nd step on)",
    "oom": "the trainer printed an out-of-memory error (CUDA's, or the host's: cannot allocate memory, the OOM killer)",
}


@dataclass(frozen=True)
class Alert:
    kind: str  # one of KINDS
    message: str
    hint: str
    step: int | None = None

    def line(self) -> str:
        return f"{self.message} Hint: {self.hint}"


def _finite(v) -> bool:
    return isinstance(v, int | float) and math.isfinite(v)


def _nonfinite(key: str, value) -> bool:
    # verl's file logger writes NaN and inf as null; TRL's callback as NaN / Infinity
    return value is None or (isinstance(value, float) and not math.isfinite(value))


def check_step(family: str | None, step: int, history: dict[int, dict]) -> list[Alert]:
    """Alerts raised by the metrics of `step` (history holds every step so far, this one included)."""
    data = history.get(step, {})
    out: list[Alert] = []
    lr_key = LR_KEY.get(family or "", "the learning rate")
    bad = [k for k, v in data.items() if ("loss" in k or k in GRAD_NORMS) and _nonfinite(k, v)]
    if bad:
        out.append(
            Alert(
                "nonfinite",
                f"{bad[0]} is {_show(data[bad[0]])} at step {step}"
                + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else "")
                + ".",
                f"lower the learning rate ({lr_key}) and check the data for empty or overlong samples; "
                "on GPUs prefer bf16 to fp16",
                step,
            )
        )
    for key in GRAD_NORMS:
        value = data.get(key)
        before = [history[s][key] for s in sorted(history) if s < step and _finite(history[s].get(key))][-20:]
        if _finite(value) and len(before) >= 3:
            median = statistics.median(before)
            if value > SPIKE_FLOOR and median > 0 and value > SPIKE_FACTOR * median:
                out.append(
                    Alert(
                        "grad_spike",
                        f"{key} spiked to {value:.4g} at step {step} ({value / median:.0f}x its recent median "
                        f"{median:.3g}).",
                        f"lower the learning rate ({lr_key}) or clip harder ({CLIP_KEY.get(family or '', 'clip')})",
                        step,
                    )
                )
    if family == "ppo":
        out += _rl_alerts(step, history)
    return out


def _rl_alerts(step: int, history: dict[int, dict]) -> list[Alert]:
    data = history[step]
    out = []
    adv_max, adv_min = data.get("critic/advantages/max"), data.get("critic/advantages/min")
    score_max, score_min = data.get("critic/score/max"), data.get("critic/score/min")
    logged_adv = _finite(adv_max) and _finite(adv_min)
    zero_adv = logged_adv and abs(adv_max) < 1e-8 and abs(adv_min) < 1e-8
    same_score = _finite(score_max) and _finite(score_min) and score_max == score_min
    # equal rewards zero every group-relative advantage, but not a critic's (GAE): when advantages are logged, they say
    if zero_adv or (same_score and not logged_adv):
        value = f" ({score_max:.4g})" if _finite(score_max) and same_score else ""
        out.append(
            Alert(
                "same_reward",
                f"every sample got the same reward{value} at step {step}: the advantages are all zero, so this "
                "step learns nothing.",
                "a reward with partial credit (reward=fn reward.fn=FILE.py:FUNCTION), more samples per prompt "
                "(actor_rollout_ref.rollout.n), or SFT first so the model writes the answer format",
                step,
            )
        )
    out += _rollout_gap(step, history) + _offpolicy(step, history)
    scores = [history[s]["critic/score/mean"] for s in sorted(history) if _finite(history[s].get("critic/score/mean"))]
    if len(scores) >= 6:
        rolling = [sum(scores[i - 2 : i + 1]) / 3 for i in range(2, len(scores))]
        best, now = max(rolling), rolling[-1]
        # a fall of more than half of the best level (and of a level that is not noise around zero)
        if best > 0.05 and best - now > 0.5 * best and rolling[-2] - now > 0:
            out.append(
                Alert(
                    "reward_collapse",
                    f"the mean reward collapsed: {now:.3g} over the last 3 steps, from {best:.3g} at best.",
                    "lower the learning rate (actor_rollout_ref.actor.optim.lr) or raise the KL penalty "
                    "(actor_rollout_ref.actor.kl_loss_coef); resume from an earlier checkpoint with "
                    "`trainctl ckpt ls` to pick one",
                    step,
                )
            )
    return out


def _rollout_gap(step: int, history: dict[int, dict]) -> list[Alert]:
    gap = history[step].get(ROLLOUT_GAP)
    if not _finite(gap):
        return []
    before = [history[s][ROLLOUT_GAP] for s in sorted(history) if s < step and _finite(history[s].get(ROLLOUT_GAP))]
    median = statistics.median(before) if len(before) >= 3 else None
    grew = median is not None and gap > ROLLOUT_GAP_FLOOR and gap > ROLLOUT_GAP_GROWTH * median
    if gap <= ROLLOUT_GAP_ALERT and not grew:
        return []
    why = f"{gap / median:.0f}x its median of the earlier steps" if grew else f"over {ROLLOUT_GAP_ALERT:g}"
    return [
        Alert(
            "rollout_gap",
            f"the rollout's and the trainer's token probabilities differ by {gap:.3g} on average at step {step} "
            f"({ROLLOUT_GAP}, {why}): the updates are computed for a policy the rollout did not sample from.",
            "sample in the trainer's precision (actor_rollout_ref.rollout.dtype=float32 with an fp32 trainer), check "
            "that the weights reach the rollout after each update, or correct for the gap with truncated importance "
            "sampling: algorithm.rollout_correction.rollout_is=token",
            step,
        )
    ]


def _show(value) -> str:
    return "NaN or inf" if value is None else repr(value)


_OOM = re.compile(
    r"CUDA out of memory|OutOfMemoryError|out of memory|can't allocate memory|Cannot allocate memory"
    r"|memory pressure \(OOM\)|oom-kill",
    re.IGNORECASE,
)
_GRAD_NOT_FINITE = re.compile(r"grad_norm is not finite: (\S+)")


def check_line(line: str) -> Alert | None:
    """An alert from one line the trainer printed, or None."""
    if _OOM.search(line):
        return Alert(
            "oom",
            "out of memory: " + line.strip()[:160],
            "lower hardware.micro_batch_size_per_gpu or the data's max lengths, or turn on hardware.param_offload "
            "and hardware.optimizer_offload; `trainctl model info MODEL algorithm=... hardware=...` estimates the "
            "memory per GPU",
        )
    m = _GRAD_NOT_FINITE.search(line)
    if m:
        return Alert(
            "nonfinite",
            f"the gradient norm is {m.group(1)}: the trainer skipped this update.",
            "lower the learning rate and check the data for empty or overlong samples",
        )
    return None


def _offpolicy(step: int, history: dict[int, dict]) -> list[Alert]:
    data, out = history[step], []
    evicted = data.get(EVICTED)
    if TRAINER_WAIT in data and _finite(evicted) and evicted > 0:  # verl logs the count in every mode: 0 when on
        out.append(
            Alert(
                "stale_drops",
                f"{evicted:.0f} samples were dropped as too stale at step {step} (offpolicy.on_stale=drop): their "
                "generation is wasted, and the samples that survive are the short ones, which finish in time.",
                "allow more lag (offpolicy.max_staleness one higher), generate less far ahead "
                "(offpolicy.prefetch_batches), or wait for them instead: offpolicy.on_stale=wait",
                step,
            )
        )
    waits = [history[s][TRAINER_WAIT] for s in sorted(history) if s >= 2 and _finite(history[s].get(TRAINER_WAIT))]
    if step >= 2 and _finite(data.get(TRAINER_WAIT)) and len(waits) >= TRAINER_WAIT_WINDOW:
        wait = statistics.mean(waits[-TRAINER_WAIT_WINDOW:])
        if wait > TRAINER_WAIT_ALERT:
            out.append(
                Alert(
                    "trainer_wait",
                    f"the trainer waited for its batch {wait:.0%} of each step (the mean of the last "
                    f"{TRAINER_WAIT_WINDOW}, at step {step}): generation is slower than training, and running ahead "
                    "does not hide it.",
                    "generate further ahead (offpolicy.prefetch_batches=2 offpolicy.max_staleness=2), or give the "
                    "rollout more devices (offpolicy=split offpolicy.rollout_gpus)",
                    step,
                )
            )
    return out
