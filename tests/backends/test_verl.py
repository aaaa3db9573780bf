"""trainctl.backends.verl: verl's defaults composed from its own YAML (cached), the keys its dataclasses declare
beyond that YAML, the file logger kept on, and the command each launcher runs."""

from __future__ import annotations

import pickle
import shlex
import sys
from pathlib import Path

import pytest

from trainctl import paths
from trainctl.backends import verl
from trainctl.backends.base import JOB_CONFIG_DIR, ONE_PROCESS_ENV
from trainctl.errors import ConfigProblems
from trainctl.plan import make_plan
from trainctl.runtime import forkserver

HYDRA = ["hydra.output_subdir=null", "hydra/job_logging=stdout"]


def test_verls_defaults_are_its_own_yaml_composed_and_each_caller_gets_a_copy():
    defaults = verl.verl_defaults("ppo_trainer")
    assert defaults.actor_rollout_ref.actor.optim.lr == verl.verl_default_tree("ppo_trainer")[
        "actor_rollout_ref"]["actor"]["optim"]["lr"]  # fmt: skip
    keys = verl.verl_keys("ppo_trainer")
    assert {"actor_rollout_ref", "actor_rollout_ref.actor", "actor_rollout_ref.actor.optim.lr"} <= keys
    defaults.actor_rollout_ref.actor.optim.lr = 123.0
    assert verl.verl_defaults("ppo_trainer").actor_rollout_ref.actor.optim.lr != 123.0
    # interpolations are kept, as verl resolves them at run time
    assert any(isinstance(v, str) and v.startswith("${") for v in _leaves(verl.verl_default_tree("ppo_trainer")))


def test_a_group_choice_composes_verls_option_and_an_unknown_one_lists_what_there_is():
    sft = verl.verl_keys("sft_trainer_engine", ("engine=fsdp",))
    assert "engine.strategy" in sft
    with pytest.raises(ConfigProblems) as e:
        verl.verl_keys("sft_trainer_engine", ("engine=no-such-engine",))
    problem = e.value.problems[0]
    assert problem.message == "verl has no engine option 'no-such-engine'." and problem.key == "engine"
    assert "fsdp" in problem.hint.removeprefix("available: ").split(", ")


def test_the_defaults_are_cached_on_disk_and_a_damaged_cache_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINCTL_CACHE", str(tmp_path / "cache"))  # damaged here, not in the session's cache
    verl._verl_defaults_cached.cache_clear()
    verl.verl_keys("ppo_trainer")  # composed (or read) and written to the cache
    cached = sorted(paths.cache_dir().glob("verl-ppo_trainer-*.pkl"))
    assert cached, "no cache file written"
    _, keys, tree = pickle.loads(cached[-1].read_bytes())
    assert "actor_rollout_ref.actor.optim.lr" in keys and "actor_rollout_ref" in tree
    for f in cached:
        f.write_bytes(b"not a pickle")
    verl._verl_defaults_cached.cache_clear()
    assert "actor_rollout_ref.actor.optim.lr" in verl.verl_keys("ppo_trainer")
    assert pickle.loads(cached[-1].read_bytes())[1] == keys


def test_a_process_whose_cache_folder_changes_leaves_the_defaults_in_the_new_one(tmp_path, monkeypatch):
    """As for TRL's (tests/backends/test_trl_dpo.py): the defaults this process holds go to its new cache folder."""
    keys = verl.verl_keys("ppo_trainer")
    monkeypatch.setenv("TRAINCTL_CACHE", str(tmp_path / "other"))
    assert verl.verl_keys("ppo_trainer") == keys
    (cached,) = (tmp_path / "other").glob("verl-ppo_trainer-*.pkl")
    assert pickle.loads(cached.read_bytes())[1] == keys


def test_declares_the_fields_verls_dataclasses_add_to_its_yaml():
    backend = verl.VerlPPO()
    tree = backend.default_tree({})
    # ActorConfig declares use_rollout_log_probs; ppo_trainer.yaml leaves it out
    assert "use_rollout_log_probs" not in tree["actor_rollout_ref"]["actor"]
    assert backend.declares(tree, "actor_rollout_ref.actor.use_rollout_log_probs")
    assert not backend.declares(tree, "actor_rollout_ref.actor.use_rollout_log_probs.below_a_scalar")
    assert not backend.declares(tree, "actor_rollout_ref.actor.no_such_field")
    assert not backend.declares(tree, "no_such_section.x")
    # a field typed as a mapping takes any key below it
    assert backend.declares(tree, "actor_rollout_ref.actor.global_batch_info.anything.below")


def test_a_declared_field_is_added_with_a_plus_and_an_undeclared_one_is_refused():
    plan = make_plan(["algorithm=grpo", "actor_rollout_ref.actor.use_rollout_log_probs=true"], native=False)
    assert "+actor_rollout_ref.actor.use_rollout_log_probs=true" in plan.built.raw_overrides()
    with pytest.raises(ConfigProblems) as e:
        make_plan(["algorithm=grpo", "actor_rollout_ref.actor.use_rollout_log_probz=true"], native=False)
    assert [p.key for p in e.value.problems] == ["actor_rollout_ref.actor.use_rollout_log_probz"]


def test_the_file_logger_stays_on_whatever_logger_is_set():
    """`trainctl runs` and `ckpt` read the run folder's metrics record, which verl's file logger writes."""
    plan = make_plan(["algorithm=grpo", "trainer.logger=[wandb]"], native=False)
    assert plan.value("trainer.logger") == ["console", "file", "wandb"]
    assert plan.backend_cfg.trainer.logger == ["console", "file", "wandb"]
    kept = make_plan(["algorithm=grpo", "trainer.logger=[file,console]"], native=False)
    assert kept.value("trainer.logger") == ["file", "console"]


MICRO_KEYS = (
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
    "critic.ppo_micro_batch_size_per_gpu",
)


@pytest.mark.parametrize(
    ("words", "shares"),
    [
        ([], (64, 64, 64, 64)),  # the tiny recipe's step in one pass: 8 prompts x 8 samples on one rank
        (["hardware=8gpu"], (8, 8, 8, 8)),  # 64 sequences over 8 ranks
        (["actor_rollout_ref.rollout.n=4", "algorithm=ppo"], (32, 32, 32, 32)),
        (["actor_rollout_ref.actor.ppo_mini_batch_size=4"], (32, 64, 64, 64)),  # two updates a step
        (["hardware.micro_batch_size_per_gpu=16"], (16, 16, 16, 16)),  # under the share: as set
    ],
)
def test_the_micro_batch_is_at_most_a_ranks_share_of_each_pass(words, shares):
    """hardware.micro_batch_size_per_gpu is an upper bound (the recipe's 64): verl's engine asserts that a micro-batch
    divides what a rank holds, so a key the mapping set above its pass's share gets the share; the plan is valid."""
    plan = make_plan(["recipe=grpo-arith-tiny-cpu", *words], native=False, strict=False)
    assert [p.message for p in plan.errors if "micro" in p.message] == []
    assert tuple(plan.built.leaves[k] for k in MICRO_KEYS) == shares
    clamped = [k for k, v in zip(MICRO_KEYS, shares, strict=True) if v < plan.cfg.hardware.micro_batch_size_per_gpu]
    assert all(plan.built.origins[k] == verl.MICRO_ORIGIN for k in clamped)


def test_a_micro_batch_set_on_verls_own_key_is_the_users_and_checked_as_set():
    plan = make_plan(
        ["recipe=grpo-arith-tiny-cpu", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=128"],
        native=False,
        strict=False,
    )
    assert plan.built.leaves["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == 128
    assert any("do not split into micro-batches" in p.message for p in plan.errors)


def test_ppo_runs_main_ppo_on_a_ray_of_its_own_or_the_clusters():
    plan = make_plan(["algorithm=grpo", "hardware=cpu"], native=False)
    run_dir = Path(plan.cfg.run.dir).expanduser().resolve()
    command = plan.backend.command(plan.cfg, plan.built)
    # on the cpu, the fork server starts first and becomes verl's driver (trainctl.runtime.forkserver)
    assert command.argv == [
        sys.executable, "-m", "trainctl.runtime.forkserver", "--",
        sys.executable, "-m", "verl.trainer.main_ppo", f"--config-path={run_dir}", "--config-name=verl_ppo",
        f"hydra.run.dir={run_dir}", *HYDRA,
    ]  # fmt: skip
    # and Ray asks it for each worker: the client is a file of the standard library, run without site-packages
    client = plan.value("ray_kwargs.ray_init.runtime_env.py_executable")
    assert client == f"{sys.executable} -S {Path(forkserver.__file__).with_name('forkserver_client.py')}"
    unforked = make_plan(["algorithm=grpo", "hardware=cpu", "hardware.fork_workers=false"], native=False)
    assert unforked.backend.command(unforked.cfg, unforked.built).argv == command.argv[4:]
    assert unforked.value("ray_kwargs.ray_init.runtime_env.py_executable") is None
    # never a cluster from the caller's RAY_ADDRESS on a local launch
    assert command.env == {"RAY_ADDRESS": "local", "RAY_prestart_worker_first_driver": "0"}
    assert command.launcher == "local"
    # the raw command: verl's own main_ppo with every key trainctl sets, no trainctl file needed
    assert command.raw_argv[:3] == [sys.executable, "-m", "verl.trainer.main_ppo"]
    assert command.raw_argv[3:-3] == plan.built.raw_overrides()
    cluster = make_plan(
        ["algorithm=grpo", "hardware=2x8gpu", "hardware.ray_address=ray://10.0.0.1:10001"], native=False
    )
    assert cluster.backend.command(cluster.cfg, cluster.built).env == {"RAY_ADDRESS": "ray://10.0.0.1:10001"}
    # a cluster's workers are started on its nodes, by Ray: nothing to fork them from (hardware.fork_workers is cpu's)
    on_cluster = make_plan(["algorithm=grpo", "hardware=cpu", "hardware.launcher=ray_cluster",
                            "hardware.ray_address=10.0.0.1:6379"], native=False)  # fmt: skip
    assert "trainctl.runtime.forkserver" not in on_cluster.backend.command(on_cluster.cfg, on_cluster.built).argv


def test_sft_runs_one_process_per_device_under_torchrun_or_one_controller_on_ray():
    plan = make_plan(["algorithm=sft", "hardware=8gpu"], native=False)
    command = plan.backend.command(plan.cfg, plan.built)
    torchrun = command.argv[: command.argv.index("--standalone")]
    assert torchrun in (
        [str(Path(sys.executable).parent / "torchrun")],
        [sys.executable, "-m", "torch.distributed.run"],
    )
    run_dir = Path(plan.cfg.run.dir).expanduser().resolve()
    assert command.argv[len(torchrun) :] == [
        "--standalone", "--nnodes=1", "--nproc_per_node=8", "-m", "verl.trainer.sft_trainer",
        f"--config-path={run_dir}", "--config-name=verl_sft", f"hydra.run.dir={run_dir}", *HYDRA,
    ]  # fmt: skip
    assert command.env == {}
    job = make_plan(["algorithm=sft", "hardware=4x8gpu"], native=False)
    command = job.backend.command(job.cfg, job.built, config_dir=JOB_CONFIG_DIR)
    # a Ray job runs on the cluster's interpreter, in the job's working dir
    assert command.argv == [
        "python", "-m", "verl.trainer.sft_trainer_ray", f"--config-path={JOB_CONFIG_DIR}", "--config-name=verl_sft",
        f"hydra.run.dir={JOB_CONFIG_DIR}", *HYDRA,
    ]  # fmt: skip
    assert command.launcher == "ray_job"


def test_sft_of_one_process_is_the_trainer_itself_in_a_process_group_of_one():
    """No torchrun agent for one process (a Python importing torch before the trainer starts: ~2 s a run); the
    backend's own environment comes on top."""
    plan = make_plan(["recipe=quickstart"], native=False)
    command = plan.backend.command(plan.cfg, plan.built)
    run_dir = Path(plan.cfg.run.dir).expanduser().resolve()
    assert command.argv == [
        sys.executable, "-u", "-m", "verl.trainer.sft_trainer", f"--config-path={run_dir}", "--config-name=verl_sft",
        f"hydra.run.dir={run_dir}", *HYDRA,
    ]  # fmt: skip
    assert ONE_PROCESS_ENV.items() <= command.env.items()


def test_on_slurm_sft_is_a_torchrun_agent_on_each_node_meeting_at_a_rendezvous():
    """The job's script starts one agent a node and hands them the first node's endpoint (PET_RDZV_ENDPOINT)."""
    plan = make_plan(["algorithm=sft", "hardware=2x8gpu", "hardware.launcher=slurm"], native=False)
    argv = plan.backend.command(plan.cfg, plan.built).argv
    assert argv[argv.index("--nnodes=2") : argv.index("-m")] == [
        "--nnodes=2",
        "--rdzv_backend=c10d",
        "--nproc_per_node=8",
    ]
    assert "--standalone" not in argv and argv[argv.index("-m") + 1] == "verl.trainer.sft_trainer"


def test_shell_line_quotes_what_the_shell_would_split():
    line = verl.shell_line(["python", "-m", "x", "a b", "k=$HOME"], {"TOKEN": "it's"})
    assert line == "TOKEN='it'\"'\"'s' python -m x 'a b' 'k=$HOME'"
    assert shlex.split(line) == ["TOKEN=it's", "python", "-m", "x", "a b", "k=$HOME"]
    assert verl.shell_line(["ls"]) == "ls"


def _leaves(tree):
    if isinstance(tree, dict):
        for v in tree.values():
            yield from _leaves(v)
    elif isinstance(tree, list):
        for v in tree:
            yield from _leaves(v)
    else:
        yield tree
