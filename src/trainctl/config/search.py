"""The config folders trainctl searches, user folders first, and the group options they hold."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from trainctl import paths

# The groups a user chooses from on the command line (`algorithm=grpo`), in the order `config groups` lists them.
GROUPS = ("algorithm", "model", "data", "reward", "env", "tools", "hardware", "logger", "lora", "offpolicy", "recipe")

GROUP_HELP = {
    "algorithm": "what to train, and which trainer runs it",
    "model": "the model to start from",
    "data": "the dataset, and where its prepared files live",
    "reward": "how RL responses are scored: verl's rules, your function, a reward model, an LLM judge",
    "env": "packaged environments (reasoning-gym's procedural tasks): the prompts and the scoring in one",
    "tools": "tools the model may call in RL rollouts: MCP servers (stdio, SSE, HTTP) and Python functions",
    "hardware": "where it runs: devices, nodes, launcher, parallelism",
    "logger": "where metrics go",
    "lora": "LoRA adapters instead of full fine-tuning (QLoRA: a 4-bit base), for every algorithm",
    "offpolicy": "off-policy RL (PPO family): generation ahead of training by a bounded number of policy versions",
    "recipe": "complete experiments: choose options of the groups above and set what differs",
}


@dataclass
class SearchPath:
    """User config folders (searched first), then the built-in `conf/`."""

    user_dirs: list[Path] = field(default_factory=list)
    builtin: Path = field(default_factory=paths.builtin_conf_dir)

    @classmethod
    def default(cls, config_dirs: list[Path] | None = None) -> SearchPath:
        return cls(user_dirs=paths.user_conf_dirs(config_dirs))

    @property
    def dirs(self) -> list[Path]:
        return [*self.user_dirs, self.builtin]

    def options(self, group: str) -> dict[str, Path]:
        """Every option of a group, name -> file; a user folder's file shadows a built-in one of the same name.
        Files whose name starts with `_` are the bases options inherit from, not options."""
        found: dict[str, Path] = {}
        for d in self.dirs:
            gdir = d / group
            if gdir.is_dir():
                for f in sorted(gdir.glob("*.yaml")):
                    if not f.name.startswith("_"):
                        found.setdefault(f.stem, f)
        return dict(sorted(found.items()))

    def find(self, config_path: str) -> Path | None:
        """The file Hydra loads for a config path such as `model/qwen2.5-7b` or `trainctl`."""
        for d in self.dirs:
            f = d / f"{config_path}.yaml"
            if f.is_file():
                return f
        return None

    def label(self, file: Path) -> str:
        """A short name for a config file: `conf/model/tiny.yaml`, or the user folder's path."""
        for d in self.dirs:
            try:
                rel = file.relative_to(d)
            except ValueError:
                continue
            if d == self.builtin:
                return f"conf/{rel}" if rel.parts[0] != "recipe" else f"recipes/{Path(*rel.parts[1:])}"
            return str(file)
        return str(file)


def describe(file: Path) -> str:
    """An option's one-line description: the first comment line that is not a Hydra directive or a command."""
    try:
        with file.open() as fh:
            for line in fh:
                line = line.strip()
                if not line.startswith("#"):
                    break
                text = line.lstrip("#").strip()
                if text and not text.startswith("@") and not text.startswith("trainctl "):
                    return text
    except OSError:
        pass
    return ""
