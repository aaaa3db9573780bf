"""What `model serve` and `chat` load: MODEL resolved as `trainctl eval` resolves it, and the settings the config that
training would use gives it (sampling defaults from verl's `val_kwargs`, the tool-call format, chat template kwargs).

Everything here is checked before anything is loaded: a model option that is not downloaded, a path that does not
exist, a run without a whole checkpoint, sampling words out of range. `folder()` then merges shards or adapters into
the cache (eval's verified merge; a LoRA adapter whose base model is gone fails there, before a weight is read).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainctl.errors import ConfigProblems, Problem, TrainctlError, UsageError
from trainctl.eval import settings as eval_settings
from trainctl.eval.targets import Resolved, Target, merged_folder
from trainctl.eval.targets import resolve as resolve_target

# the sampling words the commands take among their overrides (eval's, less those that count samples)
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "max_tokens", "seed")
_EVAL_ONLY = ("n", "k", "threshold")


@dataclass
class Served:
    """A model ready to load: where it comes from, what it is called, how it samples by default."""

    given: str  # MODEL as the user wrote it
    name: str  # the model id clients send (`model` in OpenAI requests)
    resolved: Resolved
    target: Target
    plan: Any  # trainctl.plan.Plan: the config training would use
    sampling: eval_settings.Sampling
    engine: str  # "hf" (trainctl's CPU sampler) or a GPU engine (vllm)
    tool_format: str  # verl's tool-call parser name (tools.format)
    chat_template_kwargs: dict = field(default_factory=dict)
    warnings: list[Problem] = field(default_factory=list)

    @property
    def cfg(self):
        return self.plan.cfg

    def value(self, path: str, default: Any = None) -> Any:
        return self.plan.value(path, default)

    def describe(self) -> str:
        """What is served, for a banner: `runs/grpo, checkpoint step 2` or `model tiny (/path)`."""
        r = self.resolved
        if r.kind == "name":
            return f"model option {self.given} ({self.target.folder})"
        if r.kind == "folder":
            return f"the model folder {self.target.folder}"
        step = f"step {self.target.step}" if self.target.step is not None else self.target.label
        where = r.run_dir or self.target.source
        return f"{where}, checkpoint {step}"

    def folder(self, command: str = "model serve") -> Path:
        """The Hugging Face folder to load: the model itself, or the checkpoint merged (once, verified) into the
        cache. Raises CheckpointError naming what is missing (a LoRA adapter's base model) before loading."""
        from trainctl.ckpt.layout import CheckpointError

        try:
            return merged_folder(self.target)
        except CheckpointError as e:
            if "cannot find the base model" not in e.message:  # trainctl.ckpt.merge's words for a base that is gone
                raise
            source, out = self.target.source, f"models/{self.name}"
            raise CheckpointError(
                e.message,
                details=e.details,
                hint="put the base model back where the adapter names it (`trainctl model pull NAME` for a hub "
                f"model), or fold the adapter into a base you have: trainctl ckpt merge {source} --base DIR --out "
                f"{out} && trainctl {command} {out}",
            ) from None

    def sampling_defaults(self) -> dict[str, Any]:
        """The defaults a request's missing settings take: validation's (val_kwargs), as eval uses them."""
        s = self.sampling
        return {"temperature": s.temperature, "top_p": s.top_p, "top_k": s.top_k, "max_tokens": s.max_tokens}


def prepare(
    model: str, words: list[str], *, name: str | None = None, search=None, command: str = "model serve"
) -> Served:
    """Resolve MODEL and compose its config; check everything that can be checked without loading. `command` is
    the trainctl command the hints name.

    Raises UsageError (a word the commands do not take), TrainctlError (nothing loadable at MODEL) or ConfigProblems
    (every problem of the config and settings at once)."""
    from trainctl.config.search import SearchPath
    from trainctl.plan import resolve

    search = search or SearchPath.default()
    given, overrides = eval_settings.split_words(words)
    for key in _EVAL_ONLY:
        if key in given:
            raise UsageError(
                f"{key}={given[key]} is a setting of `trainctl eval` (it counts samples for pass@k).",
                hint="a client asks for several answers with n in its request; here: "
                + " ".join(f"{k}=..." for k in SAMPLING_KEYS),
            )
    try:
        resolved = resolve_target(model, False, search.options("model"))
    except TrainctlError as e:  # eval's words for MODEL: its hints name this command instead
        e.hint = e.hint.replace("trainctl eval", f"trainctl {command}") if e.hint else e.hint
        raise
    # validation's sampling settings and the tool loop's parser live in the PPO family's config: compose that unless
    # the run chose another family (then its data's RL form, as eval does)
    plan = resolve(["algorithm=grpo", *resolved.args, *overrides], search)
    if plan.cfg.family != "ppo":
        plan = resolve(["algorithm=grpo", *resolved.args, *overrides, "algorithm=grpo"], search)
    cfg = plan.cfg
    problems: list[Problem] = []
    target = resolved.targets[0]
    if resolved.kind == "name":
        folder = Path(cfg.model.path).expanduser()
        if not (folder / "config.json").is_file():
            fix = f"trainctl model init {model}" if model.startswith("tiny") else f"trainctl model pull {model}"
            problems.append(
                Problem(f"model={model} is not downloaded: {folder} has no config.json.", key="model", hint=fix)
            )
        target.folder = folder
        if cfg.model.kind != "causal_lm":
            problems.append(
                Problem(
                    f"model={model} is a {cfg.model.kind} model (a score head): it scores text, it does not write any.",
                    key="model",
                    hint=f"trainctl {command} tiny, or a run or checkpoint of a policy",
                )
            )
    defaults = {
        "n": 1,
        "temperature": plan.value("actor_rollout_ref.rollout.val_kwargs.temperature", 0.0),
        "top_p": plan.value("actor_rollout_ref.rollout.val_kwargs.top_p", 1.0),
        "top_k": plan.value("actor_rollout_ref.rollout.val_kwargs.top_k", -1),
        "max_tokens": plan.value("actor_rollout_ref.rollout.response_length") or cfg.data.max_response_length,
        "seed": cfg.run.seed,
    }
    sampling, found = eval_settings.sampling(given, defaults)
    problems += found
    errors = [p for p in problems if p.is_error]
    warnings = [p for p in problems if not p.is_error] + plan.warnings
    if errors:
        raise ConfigProblems(errors, warnings)
    kwargs = plan.value("data.apply_chat_template_kwargs") or {}
    return Served(
        given=model,
        name=name or resolved.name,
        resolved=resolved,
        target=target,
        plan=plan,
        sampling=sampling,
        engine=cfg.hardware.rollout_engine,
        tool_format=cfg.tools.format,
        chat_template_kwargs=dict(kwargs),
        warnings=warnings,
    )


def context_length(folder: Path) -> int | None:
    """The model's context window (config.json's max_position_embeddings), None when it does not say."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise TrainctlError(f"{folder}/config.json cannot be read: {e}") from None
    value = config.get("max_position_embeddings") or (config.get("text_config") or {}).get("max_position_embeddings")
    return int(value) if value else None
