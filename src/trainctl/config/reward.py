"""What the reward section means for verl: where a reward or judge model lives, which of verl's reward paths a kind
takes, and the settings trainctl's reward managers read inside the run.

The mapping table (conf/mapping/verl_ppo.yaml) calls these through the `tc.*` resolvers; the checks
(trainctl.checks.reward) call them directly, so both see the same folder and the same path.

verl 0.9.1 scores responses in its reward loop (verl.experimental.reward_loop): a reward manager per reward worker,
picked by `reward.reward_manager` (a registered name, or a class loaded with importlib). Its reward-model path
(`reward.reward_model.enable`) serves the model with the rollout engine (vLLM's /classify, SGLang's embeddings) and
needs a GPU engine. So:
  rule   verl's naive manager and its built-in scorers (nothing set: exactly what verl does by default)
  fn     verl's naive manager with `custom_reward_function` (what data.reward_fn used to set)
  model  on vllm/sglang: verl's reward-model servers; on trainctl's CPU rollout (hf): trainctl's manager that runs
         AutoModelForSequenceClassification inside the reward worker (trainctl.runtime.reward_model)
  judge  trainctl's manager (trainctl.runtime.judge), which asks an OpenAI-compatible endpoint
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

# engines that run on the CPU: no reward-model server exists for them in verl
CPU_ENGINES = ("hf",)
# kind -> (verl's importlib module path, class) of trainctl's reward managers
MANAGERS = {
    "model": ("pkg://trainctl.runtime.reward_model", "SequenceClassifierRewardManager"),
    "judge": ("pkg://trainctl.runtime.judge", "JudgeRewardManager"),
}
TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "runtime" / "judge_templates"


def on_servers(kind: str, engine: str) -> bool:
    """Whether verl's own reward-model servers score (reward=model on a GPU engine)."""
    return kind == "model" and engine not in CPU_ENGINES


def manager(kind: str, engine: str) -> tuple[str, str] | None:
    """trainctl's reward manager for this kind on this engine: (module path, class), or None for verl's own."""
    if kind == "judge" or (kind == "model" and engine in CPU_ENGINES):
        return MANAGERS[kind]
    return None


def looks_like_folder(name: str) -> bool:
    """A name written as a path (./rm, ~/models/rm, /data/rm) means a folder, never a model option."""
    return "/" in name or name.startswith((".", "~"))


def is_folder(name: str) -> bool:
    """A folder: written as a path, or a bare name that is no model option but a folder here."""
    return looks_like_folder(name) or (model_option(name) is None and Path(name).is_dir())


def model_folder(name: str | None, models_dir: str) -> str | None:
    """The folder a model name means: a folder as given, else the model option's `path` (where `trainctl model pull
    NAME` writes it), else `<paths.models>/NAME` (the checks then say the option does not exist)."""
    if not name:
        return None
    if is_folder(name):
        return str(Path(name).expanduser().resolve())
    option = model_option(name)
    if option is not None:
        return str(Path(option.path).expanduser())
    return str(Path(models_dir).expanduser() / name)


def model_option(name: str):
    """The model option of this name (a trainctl.config.schema.Model), or None when there is none."""
    # what a name means depends on trainctl's home and the user's config folders (./conf)
    return _model_option(name, os.environ.get("TRAINCTL_HOME", ""), os.environ.get("HOME", ""), os.getcwd())


@lru_cache(maxsize=32)
def _model_option(name: str, *where: str):
    from trainctl.config.load import load
    from trainctl.config.search import SearchPath
    from trainctl.errors import ConfigProblems

    if name not in SearchPath.default().options("model"):
        return None
    try:
        return load([f"model={name}"]).cfg.model
    except ConfigProblems:
        return None


def template_file(reward: dict) -> str:
    """The judge's prompt template: the user's file, else the built-in one for the mode."""
    if reward.get("template"):
        return str(Path(reward["template"]).expanduser().resolve())
    return str(TEMPLATES_DIR / f"{reward['mode']}.jinja")


def runtime_settings(reward: dict, engine: str, models_dir: str, run_dir: str) -> dict[str, Any] | None:
    """What trainctl's reward manager reads inside the run (verl's `reward.reward_kwargs.trainctl`): plain values,
    never a secret (the judge's key is named by its environment variable and read in the reward worker)."""
    kind = reward["kind"]
    if manager(kind, engine) is None:
        return None
    out: dict[str, Any] = {"kind": kind, "run_dir": str(Path(run_dir).expanduser().resolve())}
    if kind == "model":
        out |= {
            "model_path": model_folder(reward.get("model"), models_dir),
            "micro_batch_size": reward["micro_batch_size"],
            "max_length": reward.get("max_length"),
        }
        return out
    local = not reward.get("url")
    out |= {
        "url": reward.get("url"),
        # a local judge is served from its folder, and transformers serve names it by its path
        "model": model_folder(reward.get("judge"), models_dir) if local else reward.get("judge"),
        "serve": local,
        "key_env": reward.get("key_env"),
        "template": template_file(reward),
        **{
            k: reward[k]
            for k in (
                "mode",
                "rubric",
                "timeout_s",
                "retries",
                "max_tokens",
                "temperature",
                "concurrency",
                "json_schema",
                "failure_score",
                "group_wait_s",
            )
        },
    }
    return out
