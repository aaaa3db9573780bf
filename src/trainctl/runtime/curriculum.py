"""env.curriculum's dataset (issue 55): verl's RL dataset over an environment's rows, each task at its level.

trainctl sets it as verl's `data.custom_cls` when env.curriculum is on (and the dataloader in the trainer's own process,
where the levels move). Its train rows are the environment's, generated at the curriculum's start level; a row of a
task the curriculum has moved is generated anew by reasoning-gym at the task's level, the row's index choosing the
entry (one seed per level: a level's rows are the same in every run with the same settings). The levels move after
each step's rewards (trainctl.runtime.env_metrics.Levels, by EnvMetrics), and are the dataset's state: torchdata's
StatefulDataLoader keeps them in the checkpoint's data.pt, so a resumed run continues at the levels reached.
"""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import OmegaConf
from verl.utils.dataset.rl_dataset import RLHFDataset

from trainctl.envs import SPEC
from trainctl.envs import reasoning_gym as kind
from trainctl.runtime import env_metrics


def _files(files) -> list[str]:
    return [str(files)] if isinstance(files, str | Path) else [str(f) for f in files]


def level_seed(seed: int, level: int) -> int:
    """The seed a task's rows are generated with at a level the run moved it to (the start level's rows are the
    environment's own, from env.seed)."""
    return seed + 1000 * (level + 1)


class CurriculumDataset(RLHFDataset):
    def __init__(self, data_files, tokenizer, processor, config, max_samples: int = -1):
        super().__init__(
            data_files=data_files, tokenizer=tokenizer, processor=processor, config=config, max_samples=max_samples
        )
        self.levels: env_metrics.Levels | None = None
        if _files(data_files) != _files(config.train_files):
            return  # the held-out rows: every task at the start level, all through the run
        self.env = OmegaConf.create(json.loads((Path(_files(data_files)[0]).parent / SPEC).read_text()))
        self.specs = {s["name"]: s for s in kind.task_specs(self.env)}
        c = self.env.curriculum
        self.levels = env_metrics.Levels(
            tops={name: kind.levels_of(name) - 1 for name in self.specs},
            window=c.window,
            raise_at=c.raise_at,
            lower_at=c.lower_at,
            start=c.start_level,
        )
        self._generated: dict[tuple[str, int], object] = {}
        env_metrics.CURRICULUM = self.levels

    def _generator(self, task: str, level: int):
        import reasoning_gym

        key = (task, level)
        if key not in self._generated:
            settings = kind.at_level(self.specs[task], level)
            seed = level_seed(self.env.seed, level)
            self._generated[key] = reasoning_gym.create_dataset(task, size=self.env.train_size, seed=seed, **settings)
        return self._generated[key]

    def __getitem__(self, item):
        row = super().__getitem__(item)
        if self.levels is None:
            return row
        info = row["extra_info"]
        task, level = info["task"], self.levels.levels.get(info["task"])
        if level is None or level == self.env.curriculum.start_level:
            return row
        entry = self._generator(task, level)[int(info["index"]) % self.env.train_size]
        fresh = kind.row(self.env, entry, task, int(info["index"]), "train")
        fresh["extra_info"]["level"] = level
        row.update({k: fresh[k] for k in ("prompt", "reward_model", "extra_info")})
        row["raw_prompt"] = self._build_messages(fresh, key=self.prompt_key)
        return row

    # torchdata's Stateful protocol: the levels go into the checkpoint's data.pt with the dataloader's position
    def state_dict(self) -> dict:
        return {"curriculum": self.levels.state_dict()} if self.levels is not None else {}

    def load_state_dict(self, state: dict) -> None:
        if self.levels is not None and state.get("curriculum"):
            self.levels.load_state_dict(state["curriculum"])
