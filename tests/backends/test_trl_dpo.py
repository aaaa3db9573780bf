"""trainctl.backends.trl_dpo: TRL's DPOConfig and ModelConfig defaults as one flat config (cached per version), and
the command that runs trainctl's DPO entry point under torchrun or Ray Train."""

from __future__ import annotations

import dataclasses
import enum
import json
import sys
from pathlib import Path

from trainctl import paths
from trainctl.backends import trl_dpo
from trainctl.backends.trl_dpo import TrlDPO
from trainctl.facts.trl import DATA_KEYS, ENTRY
from trainctl.plan import make_plan

TORCH_RUN = "torch.distributed.run"


def test_the_defaults_are_trls_dataclass_fields_and_the_data_keys():
    from trl import DPOConfig, ModelConfig

    tree = trl_dpo.trl_defaults()
    assert tree["beta"] == DPOConfig.__dataclass_fields__["beta"].default
    assert tree["lora_r"] == ModelConfig.__dataclass_fields__["lora_r"].default
    assert {k: tree[k] for k in DATA_KEYS} == DATA_KEYS
    init_fields = {f.name for cls in (DPOConfig, ModelConfig) for f in dataclasses.fields(cls) if f.init}
    assert set(tree) == init_fields | set(DATA_KEYS)
    json.dumps(tree)  # plain data: enums, tuples and the like made JSON
    assert TrlDPO().defaults({}).beta == tree["beta"]


def test_the_defaults_are_cached_on_disk_and_a_damaged_cache_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINCTL_CACHE", str(tmp_path / "cache"))  # damaged here, not in the session's cache
    trl_dpo._TRL_DEFAULTS.clear()
    tree = trl_dpo.trl_defaults()
    cached = sorted(paths.cache_dir().glob("trl-dpo-*.json"))
    assert cached and json.loads(cached[-1].read_text()) == tree
    cached[-1].write_text("{not json")
    trl_dpo._TRL_DEFAULTS.clear()
    assert trl_dpo.trl_defaults() == tree
    assert json.loads(cached[-1].read_text()) == tree


def test_a_process_whose_cache_folder_changes_leaves_the_defaults_in_the_new_one(tmp_path, monkeypatch):
    """The processes a launch starts read the defaults from the launch's cache folder: a process that knew them
    under another folder (a test session's dry runs, a server) writes them there, not only keeps them in memory."""
    tree = trl_dpo.trl_defaults()  # in this process's memory now
    monkeypatch.setenv("TRAINCTL_CACHE", str(tmp_path / "other"))
    assert trl_dpo.trl_defaults() == tree
    (cached,) = (tmp_path / "other").glob("trl-dpo-*.json")
    assert json.loads(cached.read_text()) == tree


def test_jsonable_keeps_plain_values_and_names_the_rest():
    class Mode(enum.Enum):
        FAST = "fast"

    value = {"a": (1, Mode.FAST), 2: None, "p": Path("/x")}
    assert trl_dpo._jsonable(value) == {"a": [1, "fast"], "2": None, "p": "/x"}


def test_a_local_run_is_one_process_per_device_under_torchrun():
    plan = make_plan(["algorithm=dpo", "data=hh-rlhf", "hardware=8gpu"], native=False)
    command = plan.backend.command(plan.cfg, plan.built)
    torchrun = command.argv[: command.argv.index("--standalone")]
    assert torchrun in ([str(Path(sys.executable).parent / "torchrun")], [sys.executable, "-m", TORCH_RUN])
    run_dir = Path(plan.cfg.run.dir).expanduser().resolve()
    assert command.argv[len(torchrun) :] == [
        "--standalone", "--nnodes=1", "--nproc_per_node=8", "-m", ENTRY, "--config", f"{run_dir}/trl_dpo.yaml",
    ]  # fmt: skip
    assert command.env == {} and command.launcher == "local"
    # TRL's `trl dpo` cannot run these parquet files: the plan says what the line above runs instead
    assert "trainctl's TRL entry point" in command.raw_note and "trl.DPOTrainer" in command.raw_note


def test_across_machines_ray_train_runs_the_entry_point_on_the_clusters_interpreter():
    plan = make_plan(
        ["algorithm=dpo", "data=hh-rlhf", "hardware=2x8gpu", "hardware.ray_address=ray://10.0.0.1:10001"], native=False
    )
    command = plan.backend.command(plan.cfg, plan.built, config_dir="@PWD@")
    assert command.argv == ["python", "-m", ENTRY, "--ray", "--config", "@PWD@/trl_dpo.yaml"]
    assert command.env == {"RAY_ADDRESS": "ray://10.0.0.1:10001"} and command.launcher == "ray_cluster"
