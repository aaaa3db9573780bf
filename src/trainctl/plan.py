"""A plan: what `trainctl train` would run, with every problem found before anything starts.

make_plan() loads the trainctl config (composed, resolved, checked against its schema: trainctl.config.load),
translates it into the backend's config (trainctl.backends), and runs the checks (trainctl.checks) on both:
fast ones first (no verl import: an answer within a second), then the backend's own validation.
Nothing below this module calls back into it: data, models, checks and the runtime take a config or a Subject.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from trainctl.backends import backend_for
from trainctl.backends.base import Backend, BuiltConfig, Command
from trainctl.checks import (
    data,
    distill,
    environment,
    files,
    learning_rate,
    lora,
    memory,
    offpolicy,
    ppo,
    reward,
    sft,
    tools,
    trl,
    types,
    values,
)
from trainctl.checks.base import Number, Subject
from trainctl.ckpt.lineage import OTHER_MODELS, Lineage, from_runs, others_from_runs
from trainctl.config.compose import Composition
from trainctl.config.load import Loaded, load
from trainctl.config.overrides import Override
from trainctl.config.schema import SECTIONS, Config
from trainctl.config.search import SearchPath
from trainctl.errors import ConfigProblems, Problem
from trainctl.facts.trl import TRAINERS

_FAMILY_CHECKS = {"ppo": ppo, "sft": sft, **dict.fromkeys(TRAINERS, trl)}


@dataclass
class Plan:
    loaded: Loaded
    backend: Backend
    built: BuiltConfig | None = None
    launching: bool = False
    problems: list[Problem] = field(default_factory=list)
    numbers: list[Number] = field(default_factory=list)
    lineage: Lineage | None = None  # the run (or checkpoint) the model comes from: model=runs/NAME
    # the runs other models come from, by setting: reward.model=runs/NAME, distillation.teacher=runs/NAME
    other_lineages: dict[str, Lineage] = field(default_factory=dict)

    @property
    def cfg(self) -> Config:
        """trainctl's config, typed and checked."""
        return self.loaded.cfg

    @property
    def comp(self) -> Composition:
        return self.loaded.comp

    @property
    def backend_cfg(self) -> DictConfig:
        assert self.built is not None
        return self.built.cfg

    @cached_property
    def subject(self) -> Subject:
        """What the checks look at."""
        assert self.built is not None
        return Subject(self.cfg, self.comp, self.backend.name, self.built, self.launching)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.is_error]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if not p.is_error]

    def value(self, path: str, default: Any = None) -> Any:
        """A backend config value, resolved."""
        return self.subject.value(path, default)

    def rows(self, split: str) -> int | None:
        return self.subject.rows(split)

    def loggers(self) -> list[str]:
        """Where metrics really go, as the backend config says (wherever the logger list was set)."""
        if self.backend.node == "verl":
            value = self.value("trainer.logger")
            return [value] if isinstance(value, str) else [str(v) for v in value or []]
        report = self.value("report_to")
        extra = [report] if isinstance(report, str) else list(report or [])
        # trainctl's TRL entry point prints metrics and writes the run's metrics file itself
        return ["console", *(str(r) for r in extra if r not in ("none", "console", "file"))]

    @property
    def run_dir(self) -> Path:
        return Path(self.cfg.run.dir).expanduser().resolve()

    @cached_property
    def command(self) -> Command:
        """The launch command (built once per plan)."""
        assert self.built is not None
        return self.backend.command(self.cfg, self.built)

    def backend_yaml(self) -> str:
        return OmegaConf.to_yaml(self.backend_cfg, resolve=True)

    def trainctl_tree(self) -> dict:
        """The trainctl config in reading order: the groups, the run, then this backend's keys."""
        tree = OmegaConf.to_container(self.comp.cfg, resolve=True)
        order = [*SECTIONS, self.backend.node]
        return {k: tree[k] for k in order if k in tree}

    def trainctl_yaml(self) -> str:
        return OmegaConf.to_yaml(OmegaConf.create(self.trainctl_tree()))

    def raise_for_errors(self) -> None:
        if self.errors:
            raise ConfigProblems(self.errors, self.warnings)


def resolve(
    overrides: list[str] | list[Override],
    search: SearchPath | None = None,
    launching: bool = False,
    raise_errors: bool = True,
    strict: bool = True,
) -> Plan:
    """Load and translate: trainctl's schema and every backend key and value checked, no training checks.

    With raise_errors=False, unknown backend keys stay in plan.problems (the training checks can still run on
    the rest); a value of the wrong type always raises, since arithmetic on it would be meaningless.
    """
    # model=runs/NAME: the run's latest checkpoint, merged into the cache, is the model (trainctl.ckpt.lineage)
    words, lineage = from_runs([o.raw if isinstance(o, Override) else str(o) for o in overrides])
    words, others = others_from_runs(words)  # reward.model=runs/NAME, distillation.teacher=runs/NAME
    loaded = load(words, search)
    # the same settings naming a run in a recipe or config file (distillation.teacher: runs/quickstart)
    written = [f"{o.key}={v}" for o in OTHER_MODELS if o.key not in others and (v := _written(loaded, o.key))]
    extra, more = others_from_runs(written)
    if more:
        others.update(more)
        words = [*words, *(w for w in extra if w.partition("=")[0] in more)]
        loaded = load(words, search)
    # env=NAME: its rows generated where data=env reads them (once per setting of it), its settings checked first
    _prepare_env(loaded.cfg)
    # the reward kind translates its own settings: they must be what it declares before anything is built
    found = reward.section(loaded.cfg, loaded.comp)
    if found:
        raise ConfigProblems(found)
    plan = Plan(loaded=loaded, backend=backend_for(loaded.cfg.family), launching=launching, lineage=lineage)
    plan.other_lineages = others
    plan.problems += values.checks(loaded.cfg, loaded.comp)
    if strict:
        plan.raise_for_errors()
    plan.built = plan.backend.build(loaded.cfg, loaded.comp, plan.problems)
    typed = types.check(plan.subject)
    plan.problems += typed
    if raise_errors or (strict and any(p.is_error for p in typed)):
        plan.raise_for_errors()
    return plan


def _prepare_env(cfg) -> None:
    env_chosen, reads_env = cfg.env.kind != "none", "env" in (cfg.data.name, cfg.reward.name)
    if reads_env and not env_chosen:
        raise ConfigProblems(
            [
                Problem(
                    f"data={cfg.data.name} reward={cfg.reward.name}: data=env and reward=env read the run's "
                    "environment, and env=none chose none.",
                    key="env",
                    hint="env=reasoning_gym env.tasks=[spell_backward,basic_arithmetic]   (env=NAME chooses data=env "
                    "and reward=env itself)",
                )
            ]
        )
    if env_chosen and not (cfg.data.name == cfg.reward.name == "env"):  # a file chose env but not what reads it
        raise ConfigProblems(
            [
                Problem(
                    f"env={cfg.env.name} with data={cfg.data.name} reward={cfg.reward.name}: the environment supplies "
                    "the prompts and their scoring, which data=env and reward=env read.",
                    key="env",
                    hint=f"data=env reward=env (env={cfg.env.name} on the command line chooses them itself), or "
                    "env=none",
                )
            ]
        )
    from trainctl import envs

    # a verifiers taskset's toolsets and tools=verifiers, which serves them: both or neither (before rows are written)
    found = envs.tool_problems(cfg)
    if found:
        raise ConfigProblems(found)
    if env_chosen:
        envs.prepare(cfg)


def _written(loaded: Loaded, key: str) -> str | None:
    value = OmegaConf.select(loaded.comp.cfg, key, default=None)
    return value if isinstance(value, str) and value else None


def make_plan(
    overrides: list[str] | list[Override],
    search: SearchPath | None = None,
    launching: bool = False,
    native: bool = True,
    strict: bool = True,
) -> Plan:
    """Load, translate and check. Raises ConfigProblems listing every error found (warnings ride along).

    With strict=False (`config show`), only a config that cannot be loaded raises; every other problem stays in
    plan.problems for the caller to show beside the config.
    """
    plan = resolve(overrides, search, launching, raise_errors=False, strict=strict)
    if not strict and plan.errors:
        return plan  # the training checks read values of the right types; show what is there
    s = plan.subject
    family = _FAMILY_CHECKS[plan.cfg.family]
    plan.problems += family.checks(s)
    plan.problems += files.checks(s)
    plan.problems += data.checks(s)
    plan.problems += environment.checks(s)
    plan.problems += memory.checks(s)
    plan.problems += reward.checks(s)
    plan.problems += distill.checks(s)  # the teacher of algorithm=distill (issue 47)
    plan.problems += lora.checks(s)  # the lora group (issue 14)
    plan.problems += learning_rate.checks(s)  # issue 44: a rate no pretrained model of its size survives
    plan.problems += tools.checks(s)  # issue 11
    plan.problems += offpolicy.checks(s)  # issue 56: verl checks none of trainer.v1.* before the cluster is up
    if strict:
        plan.raise_for_errors()
    if not plan.errors:
        plan.numbers = family.numbers(s)
    if native:
        validate_natively(plan)
    return plan


def validate_natively(plan: Plan) -> None:
    """The backend's own validation (imports verl or TRL: seconds, unless this config's verdict is kept); raises on
    errors."""
    from trainctl.checks.native import validate

    # issue 11: the MCP servers list their tools, the functions have schemas, the template renders them (seconds,
    # before verl's own validation, which takes longer)
    plan.problems += tools.probes(plan.subject)
    plan.numbers += tools.numbers(plan.subject)
    plan.raise_for_errors()
    # an earlier verdict on this config is reused (trainctl.checks.native: its key)
    plan.problems += validate(plan.subject)
    plan.problems += reward.probes(plan.subject)  # the judge's endpoint answers
    plan.raise_for_errors()


def check_data_file(path: Path, overrides: list[str], search: SearchPath | None = None, progress=None):
    """`trainctl data check FILE [OVERRIDES]`: the file against the config that would train on it."""
    from trainctl.checks.data import reward_fn
    from trainctl.data.check import check_args, full_check

    path = Path(path).expanduser()
    search = search or SearchPath.default()
    plan = resolve(check_args(path, overrides, search), search)
    if plan.backend.name == "verl-ppo":
        limit_key = "data.max_prompt_length"
        truncation_fails = plan.value("data.truncation") == "error" and not plan.value("data.filter_overlong_prompts")
    elif plan.backend.name == "verl-sft":
        limit_key = "data.max_length"
        truncation_fails = plan.value("data.truncation") == "error"
    else:
        limit_key, truncation_fails = "max_length", False  # TRL truncates
    custom, _, _ = reward_fn(plan.subject)
    return full_check(
        path,
        plan.cfg.algorithm.data_format,
        plan.value(limit_key),
        limit_key,
        plan.cfg.model.path,
        custom_reward=bool(custom),
        truncation_fails=truncation_fails,
        progress=progress,
    )
