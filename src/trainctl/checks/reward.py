"""The reward section, before anything starts: the kind is one trainctl knows, its settings are what it declares, and
what the chosen kind checks (trainctl.backends.rewards: the reward model, the judge, ...).

`section` runs before the backend config is built (the translation reads the kind's settings); `checks` and
`probes` run on the built config with the other checks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainctl.backends import rewards
from trainctl.backends.rewards.base import RewardKind, setting_names
from trainctl.backends.rewards.registry import readers, unknown
from trainctl.errors import Problem

if TYPE_CHECKING:
    from trainctl.checks.base import Subject
    from trainctl.config.compose import Composition
    from trainctl.config.schema import Config


def section(cfg: Config, comp: Composition) -> list[Problem]:
    """reward.kind names a kind (with a did-you-mean), and its settings fit what it declares: their types and
    ranges, and no key that no kind reads."""
    from trainctl.config.load import issue_problem
    from trainctl.config.origins import COMMAND_LINE
    from trainctl.config.types import Issue, check_tree, qualname, schemas_of

    r = cfg.reward
    kind = rewards.find(r.kind)
    if kind is None:
        problem = unknown(r.kind)
        origin = comp.origin("reward.kind")
        if origin and origin != COMMAND_LINE:
            problem.message = problem.message.rstrip(".") + f" (set in {origin})."
        return [problem]
    schemas = schemas_of(kind.Settings)
    mine = setting_names(kind.Settings)
    issues = check_tree(
        {k: v for k, v in r.settings.items() if k in mine},
        schemas[qualname(kind.Settings)],
        schemas,
        path="reward",
        required=True,
    )
    for key, value in r.settings.items():
        if key not in mine and not readers(key):  # another kind's setting is for `checks` to name
            known = (*mine, *sorted({n for k in rewards.kinds() for n in setting_names(k.Settings)} - set(mine)))
            issues.append(Issue(f"reward.{key}", value, "unknown", known=known))
    return [issue_problem(i, comp, schemas) for i in issues]


def checks(s: Subject) -> list[Problem]:
    r = s.cfg.reward
    kind = rewards.kind_of(s.cfg)
    if s.cfg.family != "ppo":
        if not kind.verl_default:
            return [
                Problem(
                    f"reward={r.name} scores RL responses, but algorithm={s.cfg.algorithm.name} trains on fixed "
                    "targets.",
                    key="reward",
                    hint="drop reward=..., or choose a PPO-family algorithm (algorithm=grpo, ppo, ...)",
                )
            ]
        return []
    return [*_unread(s, kind), *_needed(s, kind), *_policy(s), *_verl_keys(s, kind), *kind.checks(s)]


def probes(s: Subject) -> list[Problem]:
    """What the kind can only tell by asking another machine (the native stage: it talks to the network)."""
    if s.cfg.family != "ppo":
        return []
    return rewards.kind_of(s.cfg).probes(s)


def _unread(s: Subject, kind: RewardKind) -> list[Problem]:
    """Settings of another kind, set: this kind would ignore them."""
    r = s.cfg.reward
    mine = setting_names(kind.Settings)
    problems = []
    for key, value in r.settings.items():
        if key in mine or value is None:
            continue
        other = readers(key)[0].name
        problems.append(
            Problem(
                f"reward.{key} is set ({value!r}), but reward={r.name} does not read it.",
                key=f"reward.{key}",
                hint=f"reward={other} reward.{key}={value}"
                if key == other
                else f"reward={other}, or drop reward.{key}",
            )
        )
    return problems


def _needed(s: Subject, kind: RewardKind) -> list[Problem]:
    r = s.cfg.reward
    settings = kind.settings(r)
    return [
        Problem(f"reward={r.name} needs reward.{key}.", key=f"reward.{key}", hint=f"reward.{key}={example}")
        for key, example in kind.needs.items()
        if not getattr(settings, key)
    ]


def _policy(s: Subject) -> list[Problem]:
    m = s.cfg.model
    if m.kind != "reward":
        return []
    return [
        Problem(
            f"model={m.name} is a reward model (kind: reward): the policy must be a causal LM.",
            key="model",
            hint=f"choose the policy with model=..., and score with reward=model reward.model={m.name}",
        )
    ]


def _verl_keys(s: Subject, kind: RewardKind) -> list[Problem]:
    """verl keys set by hand (an algorithm file, a recipe, the command line) that trainctl's reward manager needs."""
    managed = kind.manager(s.cfg)
    if managed is None:
        return []
    problems = []
    for path, value in s.built.leaves.items():
        if not path.startswith(("reward.reward_manager.", "reward.custom_reward_function.")):
            continue
        if s.built.origins.get(path) == kind.origin:
            continue
        origin = s.built.origins.get(path) or s.comp.origin(f"verl.{path}") or "the config"
        problems.append(
            Problem(
                f"{path} = {value!r} (set in {origin}) would replace trainctl's {kind.name} reward manager.",
                key=path,
                details=[f"reward={s.cfg.reward.name} scores through {managed[1]}, a reward manager of trainctl's"],
                hint="drop " + path + ", or score with reward=rule / reward=fn",
            )
        )
    return problems
