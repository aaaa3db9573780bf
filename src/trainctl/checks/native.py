"""The backend's own validation, run on the resolved backend config: what the trainer would reject at start-up.

This imports verl (or TRL), which costs 5-8 s, so it runs only once every fast check has passed.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from typing import TYPE_CHECKING

from omegaconf import OmegaConf

from trainctl.checks.files import model_present
from trainctl.errors import Problem

if TYPE_CHECKING:
    from trainctl.plan import Plan

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
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0]


@contextlib.contextmanager
def _quiet():
    """verl prints and logs while validating; the library must not."""
    with (
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore")
        previous = logging.root.manager.disable
        logging.disable(logging.WARNING)
        try:
            yield
        finally:
            logging.disable(previous)


def _resolved(plan: Plan):
    return OmegaConf.create(OmegaConf.to_container(plan.cfg, resolve=True, throw_on_missing=False))


def _skipped_model(plan: Plan) -> list[Problem]:
    return [
        Problem(
            "verl's checks of the model section were skipped: the model files are not there yet.",
            key="model.path",
            severity="warning",
        )
    ]


def verl_ppo(plan: Plan) -> list[Problem]:
    with _quiet():
        from verl.trainer.ppo.utils import need_critic, need_reference_policy
        from verl.utils.config import omega_conf_to_dataclass, validate_config

    cfg = _resolved(plan)
    have_model = model_present(plan.tc["model"]["path"])
    problems: list[Problem] = []
    with _quiet():
        try:
            # validating a critic loads the model's config and tokenizer from critic.model.path
            validate_config(cfg, need_reference_policy(cfg), use_critic=need_critic(cfg) and have_model)
        except Exception as e:
            problems.append(Problem(f"verl's validate_config rejects this config: {_message(e)}"))
        sections = [*PPO_SECTIONS, *(["actor_rollout_ref.model"] if have_model else [])]
        for section in sections:
            node = OmegaConf.select(cfg, section)
            if node is None or "_target_" not in node:
                continue
            try:
                omega_conf_to_dataclass(node)
            except Exception as e:
                problems.append(Problem(f"verl rejects {section}: {_message(e)}", key=section))
    return problems + ([] if have_model else _skipped_model(plan))


def verl_sft(plan: Plan) -> list[Problem]:
    with _quiet():
        from verl.utils.config import omega_conf_to_dataclass

    cfg = _resolved(plan)
    have_model = model_present(plan.tc["model"]["path"])
    problems: list[Problem] = []
    with _quiet():
        for section in [*SFT_SECTIONS, *(["model"] if have_model else [])]:
            try:
                omega_conf_to_dataclass(cfg[section])
            except Exception as e:
                problems.append(Problem(f"verl rejects {section}: {_message(e)}", key=section))
        interval = list(cfg.trainer.profile_interval)
        if len(interval) != 2 or interval[1] < interval[0]:
            problems.append(Problem(f"trainer.profile_interval = {interval}: [start, end] with start <= end."))
    return problems + ([] if have_model else _skipped_model(plan))


def trl_dpo(plan: Plan) -> list[Problem]:
    """Build TRL's DPOConfig and ModelConfig from the backend config, as the entry point will."""
    from trainctl.runtime.trl_dpo_args import split_args

    problems: list[Problem] = []
    with _quiet():
        from trl import DPOConfig, ModelConfig

        dpo_args, model_args, _ = split_args(OmegaConf.to_container(plan.cfg, resolve=True))
        if plan.tc["hardware"]["device"] == "cuda" and not _local_cuda():
            # DPOConfig checks bf16 against the machine it is built on, not the one the plan targets
            dpo_args.update(bf16=False, fp16=False)
        for cls, args in ((DPOConfig, dpo_args), (ModelConfig, model_args)):
            try:
                cls(**args)
            except Exception as e:
                problems.append(Problem(f"TRL's {cls.__name__} rejects this config: {_message(e)}"))
    return problems


def _local_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


BY_BACKEND = {"verl-ppo": verl_ppo, "verl-sft": verl_sft, "trl-dpo": trl_dpo}

# Where a run's name puts its output: irrelevant to whether the backend accepts the config.
_RUN_SPECIFIC = (
    "trainer.default_local_dir",
    "trainer.experiment_name",
    "trainer.project_name",
    "output_dir",
    "run_name",
)


def _fingerprint(plan: Plan) -> str:
    import hashlib
    import importlib.metadata
    import json

    from trainctl.backends.base import flatten

    tree = dict(flatten(OmegaConf.to_container(plan.cfg, resolve=True, throw_on_missing=False)))
    for key in _RUN_SPECIFIC:
        tree.pop(key, None)
    versions = [importlib.metadata.version(p) for p in ("verl", "trl", "transformers")]
    stamp = [plan.backend.name, versions, model_present(plan.tc["model"]["path"]), sorted(tree.items(), key=str)]
    return hashlib.sha256(json.dumps(stamp, default=str).encode()).hexdigest()[:24]


def validate(plan: Plan, use_cache: bool = True) -> list[Problem]:
    """The backend's own validation; a config that passed it before (same content) is not validated again."""
    from trainctl import paths

    marker = paths.cache_dir() / "validated" / _fingerprint(plan)
    if use_cache and marker.is_file():
        return []
    problems = BY_BACKEND[plan.backend.name](plan)
    if not any(p.is_error for p in problems):
        paths.atomic_write_text(marker, "")
    return problems
