"""The live view's arithmetic and alerts, fed the records and lines real trainers write (no run needed)."""

from __future__ import annotations

import json
import math

from trainctl.runs.progress import Progress, fmt_seconds
from trainctl.runs.tail import JsonlTail, LineTail, console_metrics


def test_eta_and_throughput_from_steps_as_they_arrive():
    p = Progress("sft", total=10, started=1000.0)
    for step, t in ((1, 1030.0), (2, 1032.0), (3, 1034.0), (4, 1036.0)):
        p.add_metrics([(step, {"train/loss": 5.0 - step / 10, "train/global_tokens": 1000})], now=t)
    assert p.seconds_per_step() == 2.0, "the first step's start-up time is not counted"
    assert p.eta() == 12.0 and fmt_seconds(p.eta()) == "0:12"
    assert p.tokens_per_second() == 500.0
    assert p.elapsed(now=1036.0) == 36.0
    shown = p.shown()
    assert [s.label for s in shown] == ["loss"] and shown[0].value == 4.6 and shown[0].trend[0] == 4.9


def test_the_trainers_own_timing_and_total_win():
    p = Progress("ppo", total=None, started=0.0)
    p.add_line("(TaskRunnerV1 pid=1) INFO:2026-11-23 08:00:36,968:Total training steps: 8")
    assert p.total == 8
    rec = {"critic/score/mean": 0.2, "timing_s/step": 30.0, "perf/total_num_tokens": 1800}
    p.add_metrics([(1, rec), (2, {**rec, "timing_s/step": 10.0})], now=5.0)
    assert p.seconds_per_step() == 10.0 and p.eta() == 60.0 and p.tokens_per_second() == 180.0


def test_attaching_to_a_running_run_times_from_its_start_until_steps_arrive():
    p = Progress("sft", total=100, started=0.0)
    p.add_metrics([(s, {"train/loss": 1.0}) for s in range(1, 11)], now=50.0, backlog=True)
    assert p.seconds_per_step(now=50.0) == 5.0 and p.eta(now=50.0) == 450.0


def test_alerts_nan_loss_grad_spike_same_reward_collapse_and_oom():
    seen = []
    p = Progress("ppo", total=20, started=0.0, on_alert=seen.append)
    for step in range(1, 5):
        p.add_metrics([(step, {"actor/grad_norm": 0.5, "critic/score/mean": 0.6})], now=step)
    assert seen == []
    p.add_metrics([(5, {"actor/grad_norm": 9.0, "critic/score/mean": 0.6})], now=5)
    assert seen[-1].kind == "grad_spike" and "actor/grad_norm spiked to 9 at step 5 (18x" in seen[-1].message
    assert "actor_rollout_ref.actor.optim.clip_grad" in seen[-1].hint
    # verl's file logger writes NaN as null
    p.add_metrics([(6, {"actor/pg_loss": None, "critic/score/mean": 0.1})], now=6)
    assert seen[-1].kind == "nonfinite" and seen[-1].message == "actor/pg_loss is NaN or inf at step 6."
    p.add_metrics([(7, {"critic/score/mean": 0.0, "critic/score/max": 0.0, "critic/score/min": 0.0})], now=7)
    kinds = [a.kind for a in seen]
    assert "same_reward" in kinds and "reward_collapse" in kinds
    same = next(a for a in seen if a.kind == "same_reward")
    assert same.message.startswith("every sample got the same reward (0) at step 7: the advantages are all zero")
    assert "reward=fn reward.fn=" in same.hint
    collapse = next(a for a in seen if a.kind == "reward_collapse")
    assert "from 0.6 at best" in collapse.message
    # the same kind again within a few steps is not repeated
    p.add_metrics([(8, {"critic/score/mean": 0.0, "critic/score/max": 0.0, "critic/score/min": 0.0})], now=8)
    assert [a.kind for a in seen].count("same_reward") == 1
    # a critic's advantages (PPO's GAE) are not zero when every reward is: no alert then
    critic = Progress("ppo", total=20, started=0.0, on_alert=(ppo_seen := []).append)
    same = {"critic/score/mean": 0.0, "critic/score/max": 0.0, "critic/score/min": 0.0}
    critic.add_metrics([(1, {**same, "critic/advantages/max": 1.3, "critic/advantages/min": -0.9})], now=1)
    assert ppo_seen == []
    critic.add_metrics([(2, {**same, "critic/advantages/max": 0.0, "critic/advantages/min": 0.0})], now=2)
    assert [a.kind for a in ppo_seen] == ["same_reward"]
    p.add_line("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert seen[-1].kind == "oom" and "hardware.micro_batch_size_per_gpu" in seen[-1].hint


def test_a_rollout_gap_over_the_bound_or_growing_is_an_alert_with_the_fix():
    seen = []
    p = Progress("ppo", total=20, started=0.0, on_alert=seen.append)
    # vLLM's CPU build against the fp32 trainer, as measured: a few 1e-4
    for step, gap in enumerate((3e-4, 4e-4, 3e-4, 5e-4), start=1):
        p.add_metrics([(step, {"training/rollout_probs_diff_mean": gap})], now=step)
    assert seen == []
    assert [s.label for s in p.shown()][-1] == "rollout gap"
    # growing: 9x its median, above the noise floor, though under the bound
    p.add_metrics([(5, {"training/rollout_probs_diff_mean": 0.003})], now=5)
    (grew,) = seen
    assert grew.kind == "rollout_gap" and "9x its median of the earlier steps" in grew.message
    assert "algorithm.rollout_correction.rollout_is=token" in grew.hint
    # over the bound from the first step
    q = Progress("ppo", total=20, started=0.0, on_alert=(bf16 := []).append)
    q.add_metrics([(1, {"training/rollout_probs_diff_mean": 0.02})], now=1)
    assert bf16[0].message.startswith("the rollout's and the trainer's token probabilities differ by 0.02 on average")
    assert "over 0.01" in bf16[0].message and "actor_rollout_ref.rollout.dtype=float32" in bf16[0].hint


def test_trl_writes_nan_as_nan():
    seen = []
    p = Progress("dpo", started=0.0, on_alert=seen.append)
    rec = json.loads(json.dumps({"step": 3, "data": {"train/loss": float("nan")}}))
    p.add_metrics([(rec["step"], rec["data"])], now=1)
    assert seen and seen[0].kind == "nonfinite" and "learning_rate" in seen[0].hint
    assert math.isnan(p.metrics[3]["train/loss"]) and p.shown()[0].value != p.shown()[0].value


def test_tails_return_complete_lines_only(tmp_path):
    log = tmp_path / "a.log"
    log.write_bytes(b"one\ntw")
    tail = LineTail(log)
    assert tail.read() == ["one"]
    with open(log, "ab") as fh:
        fh.write(b"o\r 50%|\x1b[36m(TaskRunner)\x1b[0m step\n")
    assert tail.read() == ["two", " 50%|(TaskRunner) step"]
    metrics = tmp_path / "m.jsonl"
    metrics.write_text('{"step": 1, "data": {"train/loss": 2.0}}\n{"step": 2, "da')
    jt = JsonlTail(metrics)
    assert jt.read() == [(1, {"train/loss": 2.0})]
    with open(metrics, "a") as fh:
        fh.write('ta": {"train/loss": 1.5}}\n')
    assert jt.read() == [(2, {"train/loss": 1.5})]


def test_verl_console_lines_carry_metrics_when_no_file_does():
    line = (
        "(TaskRunner pid=3) step:3 - train/loss:5.89 - train/total_tokens(B):1.578e-06 - val-core/x/reward/mean@1:0.5"
    )
    assert console_metrics(line) == (
        3,
        {"train/loss": 5.89, "train/total_tokens(B)": 1.578e-06, "val-core/x/reward/mean@1": 0.5},
    )
    p = Progress("sft", started=0.0)
    p.add_line(line, now=1.0)
    assert p.done == 3 and p.metrics[3]["train/loss"] == 5.89


def test_steps_that_arrive_together_are_timed_as_a_rate_not_as_poll_gaps():
    # four steps finish between two reads of the file (every half second): 0.25 s per step, not 0.5 or 1
    p = Progress("dpo", total=17, started=0.0)
    p.add_metrics([(1, {"train/loss": 0.7})], now=10.0)
    p.add_metrics([(s, {"train/loss": 0.6}) for s in range(2, 6)], now=11.0)
    p.add_metrics([(s, {"train/loss": 0.5}) for s in range(6, 10)], now=12.0)
    assert p.seconds_per_step() == 0.25 and p.eta() == 2.0


def test_an_environments_tasks_and_the_staleness_distribution_are_key_metrics_as_they_are_logged():
    from trainctl.runs.keys import key_metrics

    p = Progress("ppo", total=4, started=0.0)
    figures = {
        "critic/score/mean": 0.1, "env/spell_backward/reward": 0.2, "env/spell_backward/level": 1,
        "env/gcd/reward": 0.5, "offpolicy/staleness/0": 0.25, "offpolicy/staleness/10": 0.0,
        "offpolicy/staleness/1": 0.75, "offpolicy/staleness_max": 1.0, "offpolicy/trainer_wait": 0.01,
        "offpolicy/rollout_idle": 0.97,
    }  # fmt: skip
    p.add_metrics([(1, figures)], now=1)
    labels = [s.label for s in p.shown()]
    assert labels == [
        "reward", "staleness", "trainer wait", "rollout idle", "gcd reward", "spell_backward reward",
        "spell_backward level", "staleness 0", "staleness 1", "staleness 10",
    ]  # fmt: skip
    no_run = [km.label for km in key_metrics("ppo")][-3:]  # no run: no patterns
    assert no_run == ["staleness", "trainer wait", "rollout idle"]


def test_dropped_samples_and_a_trainer_that_waits_are_off_policy_alerts():
    seen = []
    p = Progress("ppo", total=20, started=0.0, on_alert=seen.append)
    # overlap as measured: the first step waits (nothing was generated ahead), then every other step
    for step, wait in enumerate((0.43, 0.011, 0.51, 0.008, 0.62, 0.011, 0.58), start=1):
        p.add_metrics([(step, {"offpolicy/trainer_wait": wait, "training/off_policy/evicted_samples": 0})], now=step)
    assert seen == []
    # sync-like: every step waits
    for step in (8, 9, 10):
        p.add_metrics([(step, {"offpolicy/trainer_wait": 0.45, "training/off_policy/evicted_samples": 0})], now=step)
    (waits,) = seen
    assert waits.kind == "trainer_wait" and "waited for its batch 42% of each step" in waits.message, waits.message
    assert "offpolicy.prefetch_batches=2" in waits.hint
    p.add_metrics([(11, {"offpolicy/trainer_wait": 0.01, "training/off_policy/evicted_samples": 3})], now=11)
    assert seen[-1].kind == "stale_drops" and seen[-1].message.startswith("3 samples were dropped as too stale")
    assert "offpolicy.on_stale=wait" in seen[-1].hint
    # a sync run logs evictions as 0 and no trainer wait: never an alert
    q = Progress("ppo", total=20, started=0.0, on_alert=(sync := []).append)
    q.add_metrics([(1, {"training/off_policy/evicted_samples": 2, "timing_s/gen": 1.0})], now=1)
    assert sync == []
