"""The PPO family for real on CPU: verl.trainer.main_ppo with trainctl's transformers rollout (hardware=cpu)."""

from __future__ import annotations

import pytest
import torch

from tests.real_runs import FAST_RL, GRPO_STEPS
from trainctl.metrics import read_metrics

# what each algorithm must log beyond reward, entropy, the policy loss and the policy's KL from its old self
EXTRA = {
    "grpo": ["actor/kl_loss"],  # GRPO regularises with a KL loss
    "gspo": [],
    "ppo": ["critic/vf_loss", "critic/values/mean"],  # the critic trains
    "dapo": [],
    "drgrpo": [],
    "rloo": ["actor/reward_kl_penalty"],  # KL in the reward
    "reinforce_pp": ["actor/reward_kl_penalty"],
    "remax": [],
}
SLOW = pytest.mark.slow


# session runs (tests/real_runs.py): the run each default algorithm reads, and the model it started from
SHARED = {"grpo": ("grpo_run", "tiny_model_dir")}


# grpo runs by default (the session's GRPO run); the others differ from it in verl's loss and advantage code, which
# trainctl reaches through keys the golden configs and validation tests check. PPO's critic also trains in the slow
# suite's PPO learning test (tests/launch/test_learning.py)
@pytest.mark.parametrize(
    "algorithm",
    ["grpo"]
    + [pytest.param(a, marks=SLOW) for a in ("ppo", "dapo", "gspo", "rloo", "reinforce_pp", "remax", "drgrpo")],
)
def test_the_ppo_family_trains_on_cpu(algorithm, cli, ready, tmp_path, request):
    if algorithm in SHARED:
        fixture, base = SHARED[algorithm]
        run, base = request.getfixturevalue(fixture).path, request.getfixturevalue(base)
    else:
        result = cli("train", *FAST_RL, f"algorithm={algorithm}", f"run.name={algorithm}")
        assert result.exit_code == 0, result.output[-4000:]
        run, base = tmp_path / "work" / "runs" / algorithm, ready[0]
    metrics = read_metrics(run)
    # the shared GRPO run is the recipe as shipped (12 steps) and also validates before training (step 0), for the
    # eval tests; the others run FAST_RL (2 steps)
    last = GRPO_STEPS if algorithm == "grpo" else 2
    assert sorted(metrics) == ([0] if algorithm == "grpo" else []) + list(range(1, last + 1)), sorted(metrics)
    for key in [
        "critic/score/mean",
        "reward/fn/std",  # reward=arith is a function reward too
        # the policy's entropy, from the update (the recipe runs verl's bypass mode in sync, with calculate_entropy)
        "actor/entropy_loss",
        "actor/pg_loss",
        "actor/ppo_kl",
        *EXTRA[algorithm],
    ]:
        assert all(key in metrics[s] for s in (1, 2)), f"{key} not logged: {sorted(metrics[2])[:40]}"
    # rewards are computed and differ between samples (DAPO's overlong penalty may push every one below 0)
    assert any(metrics[s]["critic/score/max"] > metrics[s]["critic/score/min"] for s in (1, 2)), "rewards vary"
    if algorithm == "dapo":
        # overlong shaping: responses that reach the length limit are penalised below 0
        assert min(metrics[s]["critic/score/min"] for s in (1, 2)) < 0
        # dynamic sampling: groups are filtered on the `acc` the reward returns (evictions are logged when any
        # group has equal scores, which is chance with this reward)
        backend = (run / "verl_ppo.yaml").read_text()
        assert "filter_groups:\n    _target_: verl.trainer.config.FilterGroupsConfig\n    enable: true" in backend

    listed = cli("ckpt", "ls", str(run))
    assert listed.exit_code == 0 and "verl-ppo" in listed.stdout and f"global_step_{last}" in listed.stdout
    if algorithm == "ppo":
        assert "critic: model+optimizer+extra" in listed.stdout

    out = tmp_path / "merged"
    merged = cli("ckpt", "merge", str(run), "--out", str(out))
    assert merged.exit_code == 0, merged.output
    from transformers import AutoModelForCausalLM, AutoTokenizer

    after = AutoModelForCausalLM.from_pretrained(out)
    before = AutoModelForCausalLM.from_pretrained(base)
    changed = [k for k, v in after.state_dict().items() if not torch.equal(v, before.state_dict()[k])]
    assert changed, "the actor's weights must differ from the initial ones"
    tok = AutoTokenizer.from_pretrained(out)
    ids = tok("What is 2 + 3?", return_tensors="pt")
    assert after.generate(**ids, max_new_tokens=4, do_sample=False).shape[1] > ids["input_ids"].shape[1]


def test_a_cpu_runs_ray_workers_are_forks_of_trainctls_fork_server(grpo_run):
    """hardware=cpu forks the run's Ray workers (trainctl.runtime.forkserver): the server loaded verl's workers' modules
    before they asked (with the raylet up), and declined none (each a fresh Python: 6-9 s of CPU)."""
    log = (grpo_run.path / "logs" / "attempt-1.log").read_text()
    assert "trainctl.runtime.forkserver" in (grpo_run.path / "command.sh").read_text()
    assert "trainctl forkserver: the workers' modules preloaded in" in log
    assert "(vLLM's" not in log and "MCP SDK's" not in log  # an hf run without tools: neither imported for it
    assert "declined a worker" not in log
    assert "not preloaded" not in log
    # verl's engines warn as they are imported: once, in the server, not again in each worker
    warning = "UserWarning: megatron engine is not available"
    assert log.count(warning) == 1, log.count(warning)


def test_a_cpu_runs_own_ray_starts_no_autoscaler(grpo_run):
    """The run's own Ray starts no autoscaler's monitor (trainctl.runtime.forkserver.lean_head): its logs are absent
    from the Ray session whose worker logs carry the run's TaskRunner's PID; the dashboard (Ray's minimal one, with
    hardware=cpu's ray_dashboard false), its agent and the log monitor are there as ever."""
    import json
    import re
    from datetime import datetime
    from pathlib import Path

    log = (grpo_run.path / "logs" / "attempt-1.log").read_text()
    pid = re.search(r"\(TaskRunnerV1 pid=(\d+)\)", log).group(1)
    # a PID comes round again: only logs written since the run started
    started = datetime.fromisoformat(json.loads((grpo_run.path / "run.json").read_text())["created"]).timestamp()
    sessions = {
        p.parents[1]
        for p in Path("/tmp/ray").glob(f"session_2*/logs/python-core-worker-*_{pid}.log")
        if p.stat().st_mtime > started
    }
    assert len(sessions) == 1, sessions
    logs = {p.name for p in (sessions.pop() / "logs").iterdir()}
    assert {"dashboard.log", "dashboard_agent.log", "log_monitor.log"} <= logs, sorted(logs)
    assert "monitor.log" not in logs, sorted(logs)
