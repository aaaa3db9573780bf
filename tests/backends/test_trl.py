"""trainctl.backends.trl: each TRL trainer's config and ModelConfig defaults as one flat config (cached per trainer and
version), and the command that runs trainctl's TRL entry point under torchrun or Ray Train."""

from __future__ import annotations

import dataclasses
import enum
import json
import sys
from pathlib import Path

import pytest

from trainctl import paths
from trainctl.backends import backend_for, trl
from trainctl.backends.base import ONE_PROCESS_ENV
from trainctl.backends.trl import TrlBackend
from trainctl.facts.trl import DATA_KEYS, ENTRY, TRAINERS
from trainctl.plan import make_plan
from trainctl.runtime.trl_args import load_class

TORCH_RUN = "torch.distributed.run"


def test_the_defaults_are_trls_dataclass_fields_and_the_data_keys():
    from trl import DPOConfig, ModelConfig

    tree = trl.trl_defaults()
    assert tree["beta"] == DPOConfig.__dataclass_fields__["beta"].default
    assert tree["lora_r"] == ModelConfig.__dataclass_fields__["lora_r"].default
    assert {k: tree[k] for k in DATA_KEYS} == DATA_KEYS
    init_fields = {f.name for cls in (DPOConfig, ModelConfig) for f in dataclasses.fields(cls) if f.init}
    assert set(tree) == init_fields | set(DATA_KEYS)
    json.dumps(tree)  # plain data: enums, tuples and the like made JSON
    assert TrlBackend("dpo").defaults({}).beta == tree["beta"]


@pytest.mark.parametrize("family", sorted(TRAINERS))
def test_each_trl_trainer_is_one_row_its_backend_reads(family):
    """One class serves every TRL trainer: its row names the config class whose defaults it holds."""
    from trl import ModelConfig

    backend = backend_for(family)
    assert isinstance(backend, TrlBackend) and backend.node == "trl" and backend.mapping == "trl"
    assert (backend.name, backend.config_file) == (f"trl-{family}", f"trl_{family}.yaml")
    config = load_class(TRAINERS[family].config)
    tree = trl.trl_defaults(family)
    init_fields = {f.name for cls in (config, ModelConfig) for f in dataclasses.fields(cls) if f.init}
    assert set(tree) == init_fields | set(DATA_KEYS)
    assert tree["learning_rate"] == config.__dataclass_fields__["learning_rate"].default


def test_the_defaults_are_cached_on_disk_and_a_damaged_cache_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINCTL_CACHE", str(tmp_path / "cache"))  # damaged here, not in the session's cache
    trl._TRL_DEFAULTS.clear()
    tree = trl.trl_defaults()
    cached = sorted(paths.cache_dir().glob("trl-dpo-*.json"))
    assert cached and json.loads(cached[-1].read_text()) == tree
    cached[-1].write_text("{not json")
    trl._TRL_DEFAULTS.clear()
    assert trl.trl_defaults() == tree
    assert json.loads(cached[-1].read_text()) == tree


def test_a_process_whose_cache_folder_changes_leaves_the_defaults_in_the_new_one(tmp_path, monkeypatch):
    """The processes a launch starts read the defaults from the launch's cache folder: a process that knew them
    under another folder (a test session's dry runs, a server) writes them there, not only keeps them in memory."""
    tree = trl.trl_defaults()  # in this process's memory now
    monkeypatch.setenv("TRAINCTL_CACHE", str(tmp_path / "other"))
    assert trl.trl_defaults() == tree
    (cached,) = (tmp_path / "other").glob("trl-dpo-*.json")
    assert json.loads(cached.read_text()) == tree


def test_jsonable_keeps_plain_values_and_names_the_rest():
    class Mode(enum.Enum):
        FAST = "fast"

    value = {"a": (1, Mode.FAST), 2: None, "p": Path("/x")}
    assert trl._jsonable(value) == {"a": [1, "fast"], "2": None, "p": "/x"}


def test_a_local_run_is_one_process_per_device_under_torchrun():
    plan = make_plan(["algorithm=dpo", "data=hh-rlhf", "hardware=8gpu"], native=False)
    command = plan.backend.command(plan.cfg, plan.built)
    torchrun = command.argv[: command.argv.index("--standalone")]
    assert torchrun in ([str(Path(sys.executable).parent / "torchrun")], [sys.executable, "-m", TORCH_RUN])
    run_dir = Path(plan.cfg.run.dir).expanduser().resolve()
    assert command.argv[len(torchrun) :] == [
        "--standalone", "--nnodes=1", "--nproc_per_node=8", "-m", ENTRY, "--trainer", "dpo",
        "--config", f"{run_dir}/trl_dpo.yaml",
    ]  # fmt: skip
    assert command.env == {} and command.launcher == "local"
    # TRL's `trl dpo` cannot run these parquet files: the plan says what the line above runs instead
    assert "trainctl's TRL entry point" in command.raw_note and "trl.DPOTrainer" in command.raw_note


def test_a_local_run_of_one_process_is_the_trainer_itself_in_a_process_group_of_one():
    """No torchrun agent for one process (a Python importing torch before the trainer starts: ~2 s a run)."""
    plan = make_plan(["recipe=dpo-arith-tiny-cpu"], native=False)
    command = plan.backend.command(plan.cfg, plan.built)
    run_dir = Path(plan.cfg.run.dir).expanduser().resolve()
    entry = [sys.executable, "-u", "-m", ENTRY]
    assert command.argv == [*entry, "--trainer", "dpo", "--config", f"{run_dir}/trl_dpo.yaml"]
    assert command.env == ONE_PROCESS_ENV


def test_on_slurm_a_torchrun_agent_on_each_node_meets_the_others_at_a_rendezvous():
    plan = make_plan(["algorithm=dpo", "data=hh-rlhf", "hardware=2x8gpu", "hardware.launcher=slurm"], native=False)
    argv = plan.backend.command(plan.cfg, plan.built).argv
    assert argv[argv.index("--nnodes=2") : argv.index(ENTRY) + 1] == [
        "--nnodes=2",
        "--rdzv_backend=c10d",
        "--nproc_per_node=8",
        "-m",
        ENTRY,
    ]
    assert "--ray" not in argv


def test_across_machines_ray_train_runs_the_entry_point_on_the_clusters_interpreter():
    plan = make_plan(
        ["algorithm=dpo", "data=hh-rlhf", "hardware=2x8gpu", "hardware.ray_address=ray://10.0.0.1:10001"], native=False
    )
    command = plan.backend.command(plan.cfg, plan.built, config_dir="@PWD@")
    assert command.argv == ["python", "-m", ENTRY, "--ray", "--trainer", "dpo", "--config", "@PWD@/trl_dpo.yaml"]
    assert command.env == {"RAY_ADDRESS": "ray://10.0.0.1:10001"} and command.launcher == "ray_cluster"


def test_the_schemas_families_are_verls_two_and_one_per_trl_trainer():
    from typing import get_args

    from trainctl.config.compose import FAMILY_NODE
    from trainctl.config.schema import Family

    assert set(get_args(Family)) == {"sft", "ppo", *TRAINERS} == set(FAMILY_NODE)
    assert {FAMILY_NODE[f] for f in TRAINERS} == {"trl"}
