"""env=reasoning_gym: reasoning-gym's procedural tasks, generated offline and scored by reasoning-gym itself.

Any generator reasoning-gym registers is a task by its name (its registry is read, not a list of ours). A mix of
tasks is reasoning-gym's own composite dataset (each task's weight its share of the rows, each its settings); every
row keeps its task (data_source reasoning_gym/TASK, so verl's validation reports each task on its own) and
reasoning-gym's entry, which its scorer reads (trainctl.runtime.rewards.reasoning_gym).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from trainctl.errors import Problem

INSTALL = "pip install 'reasoning-gym==0.1.25'"
# the data_source of a row: PREFIX/TASK
PREFIX = "reasoning_gym"


def _registry() -> dict[str, tuple[type, type]] | None:
    try:
        from reasoning_gym.factory import DATASETS
    except ImportError:
        return None
    return DATASETS


def task_specs(env) -> list[dict[str, Any]]:
    """env.tasks as {name, weight, settings} each (a bare name: weight 1, the generator's defaults)."""
    specs = []
    for t in env.tasks:
        if isinstance(t, str):
            specs.append({"name": t, "weight": 1.0, "settings": {}})
        else:
            t = dict(t)
            settings = dict(t.get("settings") or {})
            specs.append({"name": t.get("name"), "weight": t.get("weight", 1.0), "settings": settings})
    return specs


def problems(env) -> list[Problem]:
    from trainctl.suggest import closest

    registry = _registry()
    if registry is None:
        return [
            Problem(
                "env=reasoning_gym needs the reasoning-gym package, which is not installed here.",
                key="env",
                hint=INSTALL,
            )
        ]
    if not env.tasks:
        return [
            Problem(
                "env.tasks is empty: reasoning_gym needs at least one task.",
                key="env.tasks",
                hint="env.tasks=[spell_backward,basic_arithmetic]   (`trainctl env ls` lists them)",
            )
        ]
    found: list[Problem] = []
    for i, t in enumerate(env.tasks):
        key = f"env.tasks[{i}]"
        if not isinstance(t, str):
            extra = sorted(set(dict(t)) - {"name", "weight", "settings"})
            if extra or "name" not in dict(t):
                found.append(
                    Problem(
                        f"{key} = {dict(t)}: a task is a name, or {{name, weight, settings}}"
                        + (f" (not {', '.join(extra)})" if extra else " (its name is missing)")
                        + ".",
                        key=key,
                        hint=f"{key}={{name:spell_backward,weight:2,settings:{{max_word_len:5}}}}",
                    )
                )
                continue
    if found:
        return found
    for i, spec in enumerate(task_specs(env)):
        key, name = f"env.tasks[{i}]", spec["name"]
        if name not in registry:
            guess = next(iter(closest(str(name), registry)), None)
            found.append(
                Problem(
                    f"{key}: reasoning-gym has no task {name!r}.",
                    key=key,
                    details=[f"Did you mean '{guess}'?"] if guess else [],
                    hint="trainctl env ls   (every task reasoning-gym registers)",
                )
            )
            continue
        weight = spec["weight"]
        if not isinstance(weight, int | float) or isinstance(weight, bool) or weight <= 0:
            found.append(
                Problem(f"{key}.weight = {weight!r}: a task's weight is a number above 0.", key=f"{key}.weight")
            )
        config_cls = registry[name][1]
        fields = settings_of(config_cls)
        unknown = [k for k in spec["settings"] if k not in fields]
        for k in unknown:
            guess = next(iter(closest(k, fields)), None)
            found.append(
                Problem(
                    f"{key}.settings.{k}: {name} has no setting {k!r}.",
                    key=f"{key}.settings.{k}",
                    details=[f"Did you mean '{guess}'?"] if guess else [],
                    hint=f"{name}'s settings: {', '.join(fields)}   (trainctl env show {name})",
                )
            )
        if unknown:
            continue
        try:
            config = config_cls(**spec["settings"])
            if hasattr(config, "validate"):
                config.validate()
        except (AssertionError, ValueError, TypeError) as e:
            defaults = ", ".join(f"{k} (default {fields[k]!r})" for k in spec["settings"])
            found.append(
                Problem(
                    f"{key}.settings: {name} refuses {spec['settings']}: {e or type(e).__name__}.",
                    key=f"{key}.settings",
                    details=[f"{name}'s settings given: {defaults}"] if defaults else [],
                    hint=f"trainctl env show {name}   (its settings and their defaults)",
                )
            )
    if getattr(env, "answer_pattern", None) is not None:
        found += pattern_problems(env.answer_pattern)
    if not found and getattr(env, "curriculum", None) is not None and env.curriculum.enabled:
        found += curriculum_problems(env)
    return found


def settings_of(config_cls: type) -> dict[str, Any]:
    """A generator's settings (its config's fields but the seed and size, which the environment sets) and their
    defaults."""

    def default(f: dataclasses.Field) -> Any:
        if f.default is not dataclasses.MISSING:
            return f.default
        return f.default_factory() if f.default_factory is not dataclasses.MISSING else None  # None: it must be given

    return {f.name: default(f) for f in dataclasses.fields(config_cls) if f.name not in ("seed", "size")}


def _dataset(env, split: str):
    import reasoning_gym
    from reasoning_gym.composite import DatasetSpec

    curriculum = getattr(env, "curriculum", None)
    level = curriculum.start_level if curriculum is not None and curriculum.enabled else None
    specs = [
        DatasetSpec(s["name"], float(s["weight"]), s["settings"] if level is None else at_level(s, level))
        for s in task_specs(env)
    ]
    size = env.train_size if split == "train" else env.test_size
    seed = env.seed if split == "train" else env.seed + 1  # a held-out split of other draws
    return reasoning_gym.create_dataset("composite", size=size, seed=seed, datasets=specs)


def rows(env, split: str):
    """The split's rows; with a curriculum, every task at its start level (the held-out split stays there: the same
    test all through a run)."""
    for index, entry in enumerate(_dataset(env, split)):
        yield row(env, entry, entry["metadata"]["source_dataset"], index, split)


def row(env, entry: dict, task: str, index: int, split: str) -> dict[str, Any]:
    """One RL row (verl's columns) of a reasoning-gym entry."""
    question = entry["question"] if not env.instruction else f"{entry['question']}\n{env.instruction}"
    prompt = [{"role": "system", "content": env.system_prompt}] if env.system_prompt else []
    return {
        "data_source": f"{PREFIX}/{task}",
        "prompt": [*prompt, {"role": "user", "content": question}],
        "ability": "reasoning",
        "reward_model": {"style": "rule", "ground_truth": str(entry["answer"])},
        "extra_info": {
            "split": split,
            "index": index,
            "task": task,
            "answer_tag": env.answer_tag,
            # getattr: an env.json written before the key existed has none
            "answer_pattern": getattr(env, "answer_pattern", None),
            "format_score": float(getattr(env, "format_score", 0.0) or 0.0),
            # what reasoning-gym's scorer reads (its metadata too): JSON, so parquet keeps it whatever its shape
            "entry": json.dumps(entry, default=str),
        },
    }


# --- the curriculum (env.curriculum): reasoning-gym's own, one per task ------------------------------------------


def _curriculum(name: str):
    from reasoning_gym.factory import create_curriculum, has_curriculum

    return create_curriculum(name) if has_curriculum(name) else None


def levels_of(name: str) -> int:
    """How many levels reasoning-gym's curriculum of a task has (its longest attribute's)."""
    return max(len(a.levels) for a in _curriculum(name).attributes.values())


def curriculum_fields(name: str) -> dict[str, list]:
    """The generator's settings a task's curriculum sets, with each one's value at every level."""
    from reasoning_gym.coaching.attributes import RangeAttributeDefinition

    out: dict[str, list] = {}
    for a in _curriculum(name).attributes.values():
        if isinstance(a, RangeAttributeDefinition):
            out[a.lower_field_name] = out[a.upper_field_name] = list(a.levels)
        else:
            out[a.field_name] = list(a.levels)
    return out


def at_level(spec: dict[str, Any], level: int) -> dict[str, Any]:
    """A task's generator settings at a curriculum level: what reasoning-gym's curriculum sets at that level (each of
    its attributes at the level, or its last; a range spans the easiest level to this one), the task's own settings
    for the rest."""
    curriculum = _curriculum(spec["name"])
    curriculum.set_global_level(level)
    config = curriculum.generate_configuration(defaults=dict(spec["settings"]))
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name not in ("seed", "size")}


def pattern_problems(pattern: str) -> list[Problem]:
    """What is wrong with env.answer_pattern: it must compile and capture the answer in a group."""
    import re

    try:
        groups = re.compile(pattern).groups
    except re.error as e:
        return [Problem(f"env.answer_pattern = {pattern!r} is not a regular expression: {e}.", key="env.answer_pattern",
                        hint="env.answer_pattern='#### (\\S+)'   (its first group is the answer)")]  # fmt: skip
    if groups < 1:
        return [Problem(f"env.answer_pattern = {pattern!r} has no group: the scorer reads the answer from the first.",
                        key="env.answer_pattern", hint=f"env.answer_pattern='({pattern})'")]  # fmt: skip
    return []


def curriculum_problems(env) -> list[Problem]:
    """What is wrong with env.curriculum for these tasks (it is on)."""
    c = env.curriculum
    found: list[Problem] = []
    if c.lower_at is not None and c.lower_at >= c.raise_at:
        found.append(
            Problem(
                f"env.curriculum.lower_at = {c.lower_at} is not below raise_at = {c.raise_at}: a task's level would "
                "go up and down on the same reward.",
                key="env.curriculum.lower_at",
                hint=f"env.curriculum.lower_at={round(c.raise_at / 2, 3)}   (or null: levels only rise)",
            )
        )
    for i, spec in enumerate(task_specs(env)):
        key, name = f"env.tasks[{i}]", spec["name"]
        if _curriculum(name) is None:
            found.append(
                Problem(
                    f"{key}: reasoning-gym has no curriculum for {name}, and env.curriculum moves every task's level.",
                    key=key,
                    hint="env.curriculum.enabled=false, or a task with one (`trainctl env show NAME` says which)",
                )
            )
            continue
        fields = curriculum_fields(name)
        for k in spec["settings"]:
            if k in fields:
                found.append(
                    Problem(
                        f"{key}.settings.{k}: the curriculum sets {name}'s {k} (by level: {fields[k]}).",
                        key=f"{key}.settings.{k}",
                        hint=f"drop {k} from the task's settings (env.curriculum.start_level picks the level), or "
                        "env.curriculum.enabled=false",
                    )
                )
        top = levels_of(name) - 1
        if c.start_level > top:
            found.append(
                Problem(
                    f"env.curriculum.start_level = {c.start_level}: {name}'s curriculum has levels 0 to {top}.",
                    key="env.curriculum.start_level",
                    hint=f"env.curriculum.start_level={top}",
                )
            )
    return found


def tasks() -> list[str]:
    registry = _registry()
    return sorted(registry) if registry is not None else []


@dataclasses.dataclass
class Example:
    question: str
    answer: str
    right: float  # reasoning-gym's score of the answer in its tag
    untagged: float  # and of the same answer without the tag


@dataclasses.dataclass
class Description:
    settings: dict[str, Any]  # the generator's settings and their defaults
    examples: list[Example]
    curriculum: dict[str, list] | None = None  # the settings its curriculum sets, by level (None: it has none)


def describe(task: str, n: int = 3, seed: int = 0) -> Description:
    """A task's settings and n examples, scored as a run scores them (trainctl.runtime.rewards.reasoning_gym)."""
    from trainctl.errors import TrainctlError
    from trainctl.runtime.rewards.reasoning_gym import score
    from trainctl.suggest import closest

    registry = _registry()
    if registry is None:
        raise TrainctlError("reasoning-gym is not installed here.", hint=INSTALL)
    if task not in registry:
        guess = next(iter(closest(task, registry)), None)
        raise TrainctlError(
            f"reasoning-gym has no task {task!r}." + (f" Did you mean '{guess}'?" if guess else ""),
            hint="trainctl env ls",
        )
    import reasoning_gym

    settings = settings_of(registry[task][1])
    examples = []
    for entry in reasoning_gym.create_dataset(task, size=max(n, 1), seed=seed) if n else []:
        info = {"task": task, "entry": json.dumps(entry, default=str), "answer_tag": "answer"}
        answer = str(entry["answer"])
        examples.append(
            Example(entry["question"], answer, score(f"<answer>{answer}</answer>", info)[1], score(answer, info)[1])
        )
    curriculum = curriculum_fields(task) if _curriculum(task) is not None else None
    return Description(settings, examples[:n], curriculum)
