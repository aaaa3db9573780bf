"""The backend's own validation, run on the resolved backend config: what the trainer would reject at start-up.

This imports verl (or TRL), which costs 5-8 s, so it runs only once every fast check has passed, and its verdict on
a config is kept (trainctl's cache, validated/): a dry run, a `config validate` or a launch of a config validated
before imports neither.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from omegaconf import OmegaConf

from trainctl.checks.files import model_present
from trainctl.errors import Problem
from trainctl.import_cost import collector_paused
from trainctl.silence import quiet

if TYPE_CHECKING:
    from trainctl.checks.base import Subject

# Sections verl converts to dataclasses as it starts (trainer_base.py, engine_workers.py, agent_loop.py); their
# __post_init__ validates. The actor and critic are converted by validate_config itself. Left out: `ref` (workers
# rename its keys before converting it) and `reward` (its __post_init__ fails outside a running trainer).
PPO_SECTIONS = (
    "algorithm",
    "actor_rollout_ref.rollout",
    "actor_rollout_ref.rollout.checkpoint_engine",
    "distillation",
)
SFT_SECTIONS = ("engine", "optim", "checkpoint", "profiler")


def _message(e: BaseException) -> str:
    """The reason, not the wrapper: Hydra's "Error in call to target 'X':" says its cause on the next lines."""
    lines = [ln.strip() for ln in (str(e).strip() or type(e).__name__).splitlines() if ln.strip()]
    text = lines[0]
    if text.endswith(":"):
        cause = lines[1] if len(lines) > 1 else (str(e.__cause__).strip().splitlines() or [""])[0]
        text = f"{text} {cause}".strip()
    return text


def _rejected(message: str, e: BaseException, key: str | None = None) -> Problem:
    """A backend's rejection; with TRAINCTL_DEBUG=1 its traceback rides along, else the hint says how to see it."""
    import os
    import traceback

    debug = os.environ.get("TRAINCTL_DEBUG", "") not in ("", "0")
    details = traceback.format_exception(e)[-12:] if debug else []
    return Problem(
        f"{message}: {_message(e)}",
        key=key,
        details=[ln.rstrip() for chunk in details for ln in chunk.splitlines()],
        hint=None if debug else "TRAINCTL_DEBUG=1 shows the backend's traceback",
    )


def _container(s: Subject) -> dict:
    # resolving the backend config (about a thousand interpolations) is most of a plan's time: done once per
    # validation, shared by the verdict's key and the backend's own checks
    return OmegaConf.to_container(s.built.cfg, resolve=True, throw_on_missing=False)


def _skipped_model(s: Subject) -> list[Problem]:
    return [
        Problem(
            "verl's checks of the model section were skipped: the model files are not there yet.",
            key="model.path",
            severity="warning",
        )
    ]


def needs(cfg) -> tuple[bool, bool]:
    """(a reference policy, a critic), as main_ppo decides them (verl.trainer.ppo.utils: need_reference_policy,
    need_critic), read here: that module imports verl's distillation losses and, through them, the datasets
    library (~0.8 s of a dry run) that nothing else of this validation needs. tests/checks/test_native.py holds
    them to verl's."""
    reference = cfg.algorithm.get("use_kl_in_reward", False) or cfg.actor_rollout_ref.actor.use_kl_loss
    return reference, critic_needed(lambda key: OmegaConf.select(cfg, key))


def critic_needed(value) -> bool:
    """Whether main_ppo makes a critic (need_critic), from `value(key)`: a backend config's values."""
    enabled = value("critic.enable")
    if enabled is not None:
        return bool(enabled)
    return value("algorithm.adv_estimator") == "gae"  # AdvantageEstimator.GAE, a str enum


def verl_ppo(s: Subject, resolved: dict) -> list[Problem]:
    from trainctl.runtime.vllm_cpu import alias_cpu_build

    # verl's checks of a vLLM rollout (its LoRA settings) ask vLLM's version: the CPU build answers, as in the run
    alias_cpu_build()
    with quiet(), collector_paused():
        from verl.utils.config import omega_conf_to_dataclass, validate_config

    cfg = OmegaConf.create(resolved)
    have_model = model_present(s.cfg.model.path)
    problems: list[Problem] = []
    with quiet():
        try:
            # validating a critic loads the model's config and tokenizer from critic.model.path
            reference, critic = needs(cfg)
            validate_config(cfg, reference, use_critic=critic and have_model)
        except Exception as e:
            problems.append(_rejected("verl's validate_config rejects this config", e))
        sections = [*PPO_SECTIONS, *(["actor_rollout_ref.model"] if have_model else [])]
        for section in sections:
            node = OmegaConf.select(cfg, section)
            if node is None or "_target_" not in node:
                continue
            if section == "distillation" and not node.get("enabled"):
                # verl converts it only for a teacher (need_teacher_policy: distillation.enabled); converting it
                # imports verl's distillation losses and the datasets library (~0.8 s of a dry run)
                continue
            try:
                omega_conf_to_dataclass(node)
            except Exception as e:
                problems.append(_rejected(f"verl rejects {section}", e, key=section))
    return problems + ([] if have_model else _skipped_model(s))


def verl_sft(s: Subject, resolved: dict) -> list[Problem]:
    with quiet(), collector_paused():
        from verl.utils.config import omega_conf_to_dataclass

    cfg = OmegaConf.create(resolved)
    have_model = model_present(s.cfg.model.path)
    problems: list[Problem] = []
    with quiet():
        for section in [*SFT_SECTIONS, *(["model"] if have_model else [])]:
            try:
                omega_conf_to_dataclass(cfg[section])
            except Exception as e:
                problems.append(_rejected(f"verl rejects {section}", e, key=section))
        interval = list(cfg.trainer.profile_interval)
        if len(interval) != 2 or interval[1] < interval[0]:
            problems.append(Problem(f"trainer.profile_interval = {interval}: [start, end] with start <= end."))
    return problems + ([] if have_model else _skipped_model(s))


def trl(s: Subject, resolved: dict) -> list[Problem]:
    """Build the TRL trainer's config (DPOConfig, RewardConfig, ...) and ModelConfig from the backend config, as the
    entry point will."""
    from trainctl.facts.trl import TRAINERS
    from trainctl.runtime.trl_args import load_class, split_args

    problems: list[Problem] = []
    with quiet():
        with collector_paused():
            from trl import ModelConfig

            config = load_class(TRAINERS[s.cfg.family].config)
        trainer_args, model_args, _ = split_args(copy.deepcopy(resolved), s.cfg.family)
        if s.cfg.hardware.device == "cuda" and not _local_cuda():
            # TrainingArguments checks bf16 against the machine it is built on, not the one the plan targets
            trainer_args.update(bf16=False, fp16=False)
        for cls, args in ((config, trainer_args), (ModelConfig, model_args)):
            try:
                cls(**args)
            except Exception as e:
                problems.append(_rejected(f"TRL's {cls.__name__} rejects this config", e))
    return problems


def _local_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


BY_BACKEND = {"verl-ppo": verl_ppo, "verl-sft": verl_sft}

# What a run's name and folder set: irrelevant to whether the backend accepts the config. Matched on the key's last
# part, since verl repeats some (trainer.experiment_name, actor_rollout_ref.rollout.trace.experiment_name).
_RUN_SPECIFIC = ("default_local_dir", "experiment_name", "project_name", "output_dir", "run_name")
# the packages whose code validates (vLLM's version: verl's LoRA checks of a vLLM rollout; its CPU build's, which
# answers for it in the validating process: trainctl.runtime.vllm_cpu.alias_cpu_build)
_VALIDATORS = ("verl", "trl", "transformers", "vllm", "vllm-cpu")
# keys naming a model folder the validation reads (HFModelConfig loads its config and tokenizer)
_MODEL_KEYS = ("path", "model_path", "tokenizer_path", "hf_config_path")
# trainctl's code that validates: this module and what it runs (trainctl.runtime's vLLM alias and TRL arguments)
_CODE = ("checks/native.py", "runtime/vllm_cpu.py", "runtime/trl_args.py", "facts/trl.py")


def _version(package: str) -> str | None:
    """An installed distribution's version, as found on the path: the same before and after the validation installs
    its alias of vllm-cpu as vllm."""
    from importlib.machinery import PathFinder
    from importlib.metadata import DistributionFinder

    found = next(iter(PathFinder.find_distributions(DistributionFinder.Context(name=package))), None)
    return found.version if found is not None else None


def _fingerprint(s: Subject, resolved: dict) -> str:
    """The verdict's key: the resolved backend config with the run's name and folder taken out (so that a dry run
    and the launch of another run of the same config share it), the versions that validate it (the packages', and
    trainctl's code's), whether the model was there to check, and the files of every model folder it names."""
    import hashlib
    import json
    from pathlib import Path

    from trainctl import paths
    from trainctl.backends.base import flatten

    run_dir = str(Path(s.cfg.run.dir).expanduser().resolve())
    tree = {
        key: value.replace(run_dir, "<run.dir>") if isinstance(value, str) else value
        for key, value in flatten(resolved)
        if key.rsplit(".", 1)[-1] not in _RUN_SPECIFIC
    }
    folders = sorted(
        {v for k, v in tree.items() if k.rsplit(".", 1)[-1] in _MODEL_KEYS and isinstance(v, str) and v.strip()}
    )
    models = [
        [paths.file_version(f) for f in sorted(Path(d).expanduser().iterdir())]
        for d in folders
        if Path(d).expanduser().is_dir()
    ]
    package = Path(__file__).resolve().parent.parent
    code = [paths.file_version(package / f) for f in _CODE]
    versions = [_version(p) for p in _VALIDATORS]
    stamp = [s.backend, versions, code, model_present(s.cfg.model.path), models, sorted(tree.items(), key=str)]
    return hashlib.sha256(json.dumps(stamp, default=str).encode()).hexdigest()[:24]


def validate(s: Subject, use_cache: bool = True) -> list[Problem]:
    """The backend's own validation. A config that passed it before (the same content, checked by the same code
    against the same model files) is not validated again: its warnings are kept with the verdict."""
    import dataclasses
    import json

    from trainctl import paths

    resolved = _container(s)
    verdict = paths.cache_dir() / "validated" / _fingerprint(s, resolved)
    if use_cache:
        try:
            return [Problem(**p) for p in json.loads(verdict.read_text())["warnings"]]
        except (OSError, ValueError, KeyError, TypeError):
            pass  # not validated yet, or a damaged verdict: validated again
    problems = BY_BACKEND.get(s.backend, trl)(s, resolved)
    if not any(p.is_error for p in problems):
        paths.atomic_write_text(verdict, json.dumps({"warnings": [dataclasses.asdict(p) for p in problems]}))
    return problems
