"""trainctl.launch.runner: what a launch adds to the plan's command, and what it checks first."""

from __future__ import annotations

import pytest

from trainctl.errors import ConfigProblems
from trainctl.launch.runner import failure_excerpt, full_command, launch, launch_env, preflight
from trainctl.plan import make_plan


def test_the_run_environment_per_backend_and_logger(tmp_path):
    plan = make_plan(["recipe=quickstart", f"run.dir={tmp_path}/r", "logger=wandb"], native=False)
    env = launch_env(plan, attempt=2)
    assert env["VERL_PLATFORM"] == "cpu"
    assert env["VERL_DATAPROTO_SERIALIZATION_METHOD"] == "numpy"  # read alike in every process of the run
    assert env["TRAINCTL_METRICS_PATH"] == str(tmp_path / "r" / "metrics" / "attempt-2.jsonl")
    assert env["WANDB_DIR"] == str(tmp_path / "r") and env["WANDB_PROJECT"] == "trainctl"
    assert "OMP_NUM_THREADS" not in env  # Ray's one thread a worker
    two = make_plan(["recipe=quickstart", f"run.dir={tmp_path}/r", "hardware.cpu_threads=2"], native=False)
    threads = launch_env(two)
    assert threads["OMP_NUM_THREADS"] == threads["TRAINCTL_ROLLOUT_THREADS"] == "2"
    # the tiny GRPO recipe: both cores for the training passes, one for the rollout beside the agent loop
    grpo = launch_env(make_plan(["recipe=grpo-arith-tiny-cpu", f"run.dir={tmp_path}/g"], native=False))
    assert (grpo["OMP_NUM_THREADS"], grpo["TRAINCTL_ROLLOUT_THREADS"]) == ("2", "1")
    for other in ("offpolicy=overlap", "hardware.rollout_engine=vllm"):  # generating while it trains; vLLM's engine
        plan = make_plan(["recipe=grpo-arith-tiny-cpu", other, f"run.dir={tmp_path}/o"], native=False)
        assert "OMP_NUM_THREADS" not in launch_env(plan), other
    rollout = make_plan(["recipe=quickstart", f"run.dir={tmp_path}/r", "hardware.rollout_threads=3"], native=False)
    assert "OMP_NUM_THREADS" not in launch_env(rollout) and launch_env(rollout)["TRAINCTL_ROLLOUT_THREADS"] == "3"
    # what a verl run's processes leave out (trainctl.import_cost): vLLM where no engine of the run is vLLM's, and TRL
    # where the run has no critic (verl may load a critic with TRL): SFT, GRPO, but not PPO
    hidden = {"TRAINCTL_NO_VLLM", "TRAINCTL_NO_TRL"}
    assert hidden <= set(env) and hidden <= set(grpo)
    ppo = make_plan(["recipe=grpo-arith-tiny-cpu", "algorithm=ppo", f"run.dir={tmp_path}/p"], native=False)
    assert hidden & set(launch_env(ppo)) == {"TRAINCTL_NO_VLLM"}
    on_vllm = make_plan(
        ["recipe=grpo-arith-tiny-cpu", "hardware.rollout_engine=vllm", f"run.dir={tmp_path}/v"], native=False
    )
    dpo = make_plan(["recipe=dpo-arith-tiny-cpu", f"run.dir={tmp_path}/d"], native=False)
    assert hidden & set(launch_env(on_vllm)) == {"TRAINCTL_NO_TRL"} and not hidden & set(launch_env(dpo))
    gpu = make_plan(["algorithm=grpo", "hardware=8gpu"], native=False)
    assert "VERL_PLATFORM" not in launch_env(gpu) and "VERL_DATAPROTO_SERIALIZATION_METHOD" not in launch_env(gpu)
    assert full_command(gpu).env["RAY_ADDRESS"] == "local"  # never a caller's cluster for a local run
    assert "OMP_WAIT_POLICY" not in launch_env(gpu)


def test_on_cpu_openmp_threads_wait_passively_unless_the_user_says_otherwise(tmp_path, monkeypatch):
    """torch's threads spin while they wait (GNU OpenMP's default), which slowed the tiny DPO recipe 11x beside one
    busy process: every CPU run's trainers wait passively, unless the environment already chose."""
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    for recipe in ("grpo-arith-tiny-cpu", "dpo-arith-tiny-cpu", "quickstart"):
        plan = make_plan([f"recipe={recipe}", f"run.dir={tmp_path}/{recipe}"], native=False)
        assert launch_env(plan)["OMP_WAIT_POLICY"] == "PASSIVE", recipe
        assert full_command(plan).env["OMP_WAIT_POLICY"] == "PASSIVE", recipe
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert "OMP_WAIT_POLICY" not in launch_env(plan)  # the user's, which the trainer inherits


def test_failure_excerpt_ends_at_the_trainers_exception_not_torchruns():
    lines = [
        "step 1",
        "Traceback (most recent call last):",
        '  File "x.py", line 1',
        "[rank0]: ValueError: the real reason",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "the summary",
    ]
    assert failure_excerpt(lines)[-1] == "[rank0]: ValueError: the real reason"
    assert failure_excerpt(["a", "b"], keep=1) == ["b"]


def test_preflight_refuses_gpus_this_machine_does_not_have(tiny_model, arith_data):
    plan = make_plan(["recipe=quickstart", "hardware=8gpu", "hardware.attn_implementation=sdpa"], native=False)
    with pytest.raises(ConfigProblems) as e:
        preflight(plan)
    assert "hardware=8gpu needs 8 GPUs on this machine; it has 0." in str(e.value)


def test_a_launch_refused_before_it_starts_leaves_no_run_folder(tiny_model, arith_data, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan = make_plan(["recipe=quickstart", "hardware=8gpu", "hardware.attn_implementation=sdpa"], native=False)
    with pytest.raises(ConfigProblems):
        launch(plan, [])
    assert not plan.run_dir.exists(), "the run folder made to hold the run's lock is removed with the refusal"
