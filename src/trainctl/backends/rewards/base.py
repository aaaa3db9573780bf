"""What a reward kind is: the questions the rest of trainctl asks it, with the answers of a kind that sets nothing.

A kind is a class with a module of its own, registered by name:

    @register("length")
    class Length(RewardKind):
        summary = "responses closer to reward.target_chars characters score higher"
        Settings = LengthSettings  # a dataclass: reward.target_chars, with its type, range and meaning
        scores_every_row = True

        def verl(self, cfg, search):  # verl's `reward` node keys this kind sets
            return {"custom_reward_function": {...}}

Its settings are the keys written beside `reward.kind` (reward.target_chars=12): the schema gathers them unchecked
(trainctl.config.schema.Reward.settings), and they are checked against the kind's `Settings` before the backend
config is built (trainctl.checks.reward.section). A setting is a plain value (no nested section), named unlike the
keys of verl's own `reward` node (trainctl.facts.verl.REWARD_NODE_KEYS).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from trainctl.errors import Problem

if TYPE_CHECKING:
    from trainctl.checks.base import Subject
    from trainctl.config.schema import Config, Model, Reward
    from trainctl.config.search import SearchPath


@dataclass
class NoSettings:
    """A kind that reads no setting of its own."""


class RewardKind:
    """One way of scoring RL responses (the base answers for a kind that sets nothing and checks nothing)."""

    # its value of reward.kind (set by @register)
    name: ClassVar[str] = ""
    # what scores the responses, in a line (`trainctl config keys reward`)
    summary: ClassVar[str] = ""
    # the settings it reads beside reward.kind, declared as a dataclass (trainctl.config.schema's doc/opt)
    Settings: ClassVar[type] = NoSettings
    # settings that must be set (their null default means "not chosen yet"): key -> an example for the hint
    needs: ClassVar[dict[str, str]] = {}
    # what verl does with nothing set (verl's rule scorers): the only kind an algorithm without RL accepts silently
    verl_default: ClassVar[bool] = False
    # scores every row whatever its data_source (verl's rule scorers know only some data_sources)
    scores_every_row: ClassVar[bool] = False
    # reads each RL row's reward_model.ground_truth (an empty one is then a data problem)
    needs_ground_truth: ClassVar[bool] = True
    # the setting that names a custom reward function verl calls (its file is checked where it names it)
    function_key: ClassVar[str | None] = None

    @property
    def origin(self) -> str:
        """Where the backend keys this kind sets come from, as the plan names origins."""
        return f"reward={self.name} ({type(self).__module__})"

    def settings(self, reward: Reward) -> Any:
        """This kind's settings, typed (checked against `Settings` before the backend config is built)."""
        from trainctl.config.schema import from_dict

        names = setting_names(self.Settings)
        return from_dict(self.Settings, {k: v for k, v in reward.settings.items() if k in names})

    def verl(self, cfg: Config, search: SearchPath) -> dict:
        """The keys of verl's `reward` node this kind sets (nested, under `reward`), over verl's defaults and under
        the keys a user sets by hand. `search` is the composition's own: where a model option is looked up."""
        return {}

    def secret_env(self, cfg: Config) -> dict[str, str]:
        """The environment variables with secrets its scorer reads in the run (name -> what reads it): a Ray job
        finds them in the cluster nodes' environment (trainctl.checks.environment.job_secrets)."""
        return {}

    def manager(self, cfg: Config) -> tuple[str, str] | None:
        """trainctl's reward manager that scores with this config: (verl's importlib module path, class), or None
        when verl's own does (then a reward manager set by hand is the user's business)."""
        return None

    def checks(self, s: Subject) -> list[Problem]:
        """What is wrong with this kind's settings in this config, before anything starts (no network)."""
        return []

    def probes(self, s: Subject) -> list[Problem]:
        """What only asking another machine tells (an endpoint answers): the slow, native stage of the checks."""
        return []

    def eval_problems(self, cfg: Config) -> list[Problem]:
        """Why `trainctl eval`, which scores in its own process with verl's reward manager, cannot score this way."""
        return []


def only_reward_metric(s: Subject) -> list[Problem]:
    """DAPO's dynamic sampling filters groups by a metric the reward reports; a reward model or a judge reports
    only the reward itself."""
    metric = s.value("algorithm.filter_groups.metric")
    if metric == "reward":
        return []
    return [
        Problem(
            f"algorithm.filter_groups.metric = {metric!r}: reward={s.cfg.reward.name} reports only the reward itself.",
            key="algorithm.filter_groups.metric",
            hint="algorithm.filter_groups.metric=reward",
        )
    ]


def setting_names(settings: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(settings))


# -- models named by a setting (a reward model, a judge) --------------------------------------------------------


@dataclass
class NamedModel:
    """What a model name in a reward setting means: a folder, or a model option (found in the composition's config
    folders), or nothing yet (then `<paths.models>/NAME`, where nothing is)."""

    key: str  # the setting, e.g. reward.model
    name: str
    folder: Path
    option: Model | None  # the model option of that name
    as_folder: bool  # written as a path, or a bare name that is no option but a folder here

    @property
    def present(self) -> bool:
        return (self.folder / "config.json").is_file()

    def problem(self, launching: bool, search: SearchPath) -> Problem | None:
        """Why the model is not where it should be, or None when it is."""
        if self.present:
            return None
        if self.option is None and not self.as_folder:
            from trainctl.suggest import closest

            guess = closest(self.name, list(search.options("model")))
            return Problem(
                f"{self.key} = {self.name!r} is neither a model option nor a model folder.",
                key=self.key,
                details=[f"Did you mean '{guess[0]}'?"] if guess else [],
                hint="trainctl model ls lists the options (a folder is written with a / : ./my-rm)",
            )
        from trainctl.models.tiny import fetch_command

        fix = (
            fetch_command(self.name) if self.option is not None else f"point {self.key} at a Hugging Face model folder"
        )
        return Problem(
            f"{self.key} = {self.name} is not at {self.folder} (no config.json there).",
            key=self.key,
            hint=f"run: {fix}",
            severity="error" if launching or self.option is None else "warning",
        )


def looks_like_folder(name: str) -> bool:
    """A name written as a path (./rm, ~/models/rm, /data/rm) means a folder, never a model option."""
    return "/" in name or name.startswith((".", "~"))


def named_model(key: str, name: str, models_dir: str, search: SearchPath) -> NamedModel:
    """The model a setting names: a folder as given, else the model option's `path` (where `trainctl model pull
    NAME` writes it), else a bare name that is a folder here, else `<paths.models>/NAME`."""
    from trainctl.config.load import load_option

    if looks_like_folder(name):
        return NamedModel(key, name, Path(name).expanduser().resolve(), None, True)
    option = load_option("model", name, search)
    if option is not None:
        return NamedModel(key, name, Path(option.path).expanduser(), option, False)
    if Path(name).is_dir():
        return NamedModel(key, name, Path(name).resolve(), None, True)
    return NamedModel(key, name, Path(models_dir).expanduser() / name, None, False)


def model_config(folder: Path) -> dict:
    """A model folder's config.json ({} when it cannot be read)."""
    import json

    try:
        return json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return {}


def architecture(config: dict) -> str:
    return (config.get("architectures") or [config.get("model_type", "?")])[0]


def has_chat_template(folder: Path) -> bool:
    from trainctl.models.info import has_chat_template

    return has_chat_template(folder)


def run_dir(cfg: Config) -> str:
    return str(Path(cfg.run.dir).expanduser().resolve())
