"""TRL as a backend: every TRL trainer trainctl runs (DPO, reward models, KTO, ORPO, CPO/SimPO), one class.

verl 0.9.1 has no offline preference trainer, so these run on TRL. The backend config is flat, as in TRL's own
`trl dpo` command: the trainer's config fields (DPOConfig, RewardConfig, ...: beta, learning_rate, ...), ModelConfig
fields (model_name_or_path, use_peft, lora_r, ...) and the data files. What differs between trainers is one row of
trainctl.facts.trl.TRAINERS; trainctl's entry point (trainctl.runtime.trl_entry) builds the trainer that row names.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig

from trainctl import launchers, paths
from trainctl.backends.base import Backend, BuiltConfig, Command, local_launch, python_for, torchrun_for
from trainctl.facts.trl import DATA_KEYS, ENTRY, TRAINERS, Trainer

if TYPE_CHECKING:
    from trainctl.config.schema import Config


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(getattr(value, "value", value))


def trl_defaults(family: str = "dpo") -> dict:
    """A trainer's config and ModelConfig defaults, cached on disk per TRL and transformers version (TRL imports in
    ~5 s)."""
    key = repr((family, _versions()))
    cache = paths.cache_dir() / f"trl-{family}-{hashlib.sha1(key.encode()).hexdigest()[:16]}.json"
    text = _TRL_DEFAULTS.get(key)
    if text is not None:
        paths.keep_cached(cache, text.encode)
        return json.loads(text)
    if cache.is_file():
        text = cache.read_text()
        try:
            json.loads(text)
        except ValueError:  # a damaged cache is rebuilt
            text = None
    if text is None:
        text = _build_trl_defaults(TRAINERS[family])
        paths.atomic_write_text(cache, text)
    _TRL_DEFAULTS[key] = text
    return json.loads(text)


# this process's TRL defaults ((family, versions) -> JSON text), beside the cache folder's file
_TRL_DEFAULTS: dict[str, str] = {}


@lru_cache(maxsize=1)
def _versions() -> str:
    return repr((importlib.metadata.version("trl"), importlib.metadata.version("transformers")))


def _build_trl_defaults(trainer: Trainer) -> str:
    from trl import ModelConfig

    from trainctl.runtime.trl_args import load_class

    config = load_class(trainer.config)
    tree: dict = {}
    for cls in (config, ModelConfig):
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            if f.default is not dataclasses.MISSING:
                default = f.default
            elif f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            else:
                default = None
            tree.setdefault(f.name, _jsonable(default))
    tree.update(DATA_KEYS)
    return json.dumps(tree, indent=1)  # TRL's field order, fresh or cached


class TrlBackend(Backend):
    """One TRL trainer (a row of TRAINERS) as a backend."""

    node = "trl"
    mapping = "trl"  # one table for every TRL trainer: they share TrainingArguments and ModelConfig
    # model_init_kwargs is passed to from_pretrained as is
    open_paths = ("model_init_kwargs", "ref_model_init_kwargs", "accelerator_config", "fsdp_config")

    def __init__(self, family: str = "dpo"):
        self.trainer = TRAINERS[family]
        self.name = f"trl-{family}"
        self.title = self.trainer.title
        self.config_file = f"trl_{family}.yaml"

    def defaults(self, group_choices: dict[str, str]) -> DictConfig:
        from omegaconf import OmegaConf

        return OmegaConf.create(trl_defaults(self.trainer.family))  # small: ~170 flat keys

    def default_tree(self, group_choices: dict[str, str]) -> dict:
        return trl_defaults(self.trainer.family)

    def command(self, cfg: Config, built: BuiltConfig, config_dir: str | None = None) -> Command:
        run_dir = config_dir or str(Path(cfg.run.dir).expanduser().resolve())
        hw = cfg.hardware
        launcher = launchers.get(hw.launcher)
        family = self.trainer.family
        mode = launcher.torchrun_mode()
        env = launcher.trainer_env(hw)
        if mode == "standalone":
            launch, one = local_launch(config_dir, hw.gpus_per_node, ENTRY)
            env = {**one, **env}
        elif mode == "rendezvous":
            # one torchrun agent per node, started by the launcher, which sets their endpoint (PET_RDZV_ENDPOINT):
            # what TRL's `accelerate launch` runs underneath on several machines
            launch = [*torchrun_for(config_dir), f"--nnodes={hw.nnodes}", "--rdzv_backend=c10d"]
            launch += [f"--nproc_per_node={hw.gpus_per_node}", "-m", ENTRY]
        else:
            # across machines: Ray Train's TorchTrainer runs the same entry point on every worker
            launch = [python_for(config_dir), "-m", ENTRY, "--ray"]
        cls = self.trainer.trainer.replace(":", ".")
        return Command(
            argv=[*launch, "--trainer", family, "--config", f"{run_dir}/{self.config_file}"],
            env=env,
            launcher=hw.launcher,
            # TRL's own `trl dpo` reads hub datasets by name, not these parquet files, and keeps no metrics record
            raw_note=(
                f"TRL has no command of its own for this run: the line above runs trainctl's TRL entry point "
                f"({ENTRY}), which builds {cls} from {self.config_file} ({self.trainer.config.split(':')[1]} and "
                f"ModelConfig fields, the data files) and records metrics per step; it needs trainctl installed, "
                f"not its CLI."
            ),
        )
