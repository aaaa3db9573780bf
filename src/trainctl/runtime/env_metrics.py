"""An environment's figures in verl's training log (env=NAME, issue 55), and its curriculum's rule.

verl 0.9.1 logs the scores of a step's batch as a whole (critic/score/*); validation splits them by data_source, the
training log never does. trainctl.runtime.verl_patches wraps the trainer's `step` (after its rewards, before its
checkpoint) and `_compute_metrics`, and asks EnvMetrics, each step, for

  env/TASK/reward     the mean train reward of the task's responses in the step's batch
  env/TASK/level      with env.curriculum on: the task's level after the step (the next step's prompts are at it)
  env/TASK/rewards/NAME   env=verifiers: the mean of each of the taskset's rewards (its own score, unweighted), as
                      its scorer returned them beside the total (trainctl.runtime.rewards.verifiers)
  env/TASK/metrics/NAME   env=verifiers: the mean of each of its @vf.metric figures, likewise

Levels is the curriculum's rule; the dataset that holds it (trainctl.runtime.curriculum.CurriculumDataset, in the
same process) registers it here, and the step moves it before verl saves the step's checkpoint, so the level a
checkpoint holds is the one its next step starts at. trainctl sets TRAINCTL_ENV (the environment's kind) for every
run with an environment; its verl plugin applies the patch then.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field

# the curriculum of this process's train dataset, once it is built (CurriculumDataset)
CURRICULUM: Levels | None = None


@dataclass
class Levels:
    """Each task's level, moved by its rolling mean reward: up at raise_at, down at lower_at (None: never), one level
    at a time; after a move the task's window starts over, so the next move needs `window` steps at the new level."""

    tops: dict[str, int]  # task -> its highest level
    window: int
    raise_at: float
    lower_at: float | None = None
    start: int = 0
    levels: dict[str, int] = field(default_factory=dict)
    recent: dict[str, deque] = field(default_factory=dict)

    def __post_init__(self):
        for task in self.tops:
            self.levels.setdefault(task, min(self.start, self.tops[task]))
            self.recent.setdefault(task, deque(maxlen=self.window))

    def update(self, rewards: dict[str, float]) -> dict[str, int]:
        """Take a step's mean reward of each task it had; the tasks whose level moved, at their new level."""
        moved = {}
        for task, reward in rewards.items():
            if task not in self.levels:
                continue
            recent = self.recent[task]
            recent.append(float(reward))
            if len(recent) < self.window:
                continue
            mean = sum(recent) / len(recent)
            level = self.levels[task]
            if mean >= self.raise_at and level < self.tops[task]:
                level += 1
            elif self.lower_at is not None and mean <= self.lower_at and level > 0:
                level -= 1
            else:
                continue
            self.levels[task] = moved[task] = level
            recent.clear()
        return moved

    def state_dict(self) -> dict:
        return {"levels": dict(self.levels), "recent": {t: list(r) for t, r in self.recent.items()}}

    def load_state_dict(self, state: dict) -> None:
        for task, level in state.get("levels", {}).items():
            if task in self.levels:
                self.levels[task] = min(int(level), self.tops[task])
        for task, values in state.get("recent", {}).items():
            if task in self.recent:
                self.recent[task] = deque(values, maxlen=self.window)


def task_rewards(batch) -> dict[str, float]:
    """The mean reward of each task in a step's batch (verl's KVBatchMeta: its rows are read from TransferQueue),
    padding rows left out. A row's task is its data_source's last part (reasoning_gym/TASK)."""
    import transfer_queue as tq

    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["data_source", "rm_scores"])
    sources = list(data["data_source"].tolist() if hasattr(data["data_source"], "tolist") else data["data_source"])
    scores = data["rm_scores"]
    scores = scores.to_padded_tensor(0.0) if getattr(scores, "is_nested", False) else scores
    totals = scores.float().sum(-1).tolist()
    by_task: dict[str, list[float]] = defaultdict(list)
    for tag, source, score in zip(batch.tags, sources, totals, strict=True):
        if not tag.get("is_padding", False):
            by_task[str(source).rsplit("/", 1)[-1]].append(score)
    return {task: sum(v) / len(v) for task, v in by_task.items()}


def reward_parts(batch) -> dict[str, float]:
    """The mean of each reward and metric the scorer returned beside the total (its `rewards/NAME` and `metrics/NAME`
    keys, which verl keeps in each response's extra_fields.reward_extra_info), per task: env/TASK/rewards/NAME,
    env/TASK/metrics/NAME."""
    import transfer_queue as tq

    data = tq.kv_batch_get(
        keys=batch.keys, partition_id=batch.partition_id, select_fields=["data_source", "extra_fields"]
    )
    sources = list(data["data_source"].tolist() if hasattr(data["data_source"], "tolist") else data["data_source"])
    extras = list(data["extra_fields"].tolist() if hasattr(data["extra_fields"], "tolist") else data["extra_fields"])
    parts: dict[str, list[float]] = defaultdict(list)
    for tag, source, extra in zip(batch.tags, sources, extras, strict=True):
        extra = getattr(extra, "data", extra)
        info = extra.get("reward_extra_info", {}) if isinstance(extra, dict) else {}
        if tag.get("is_padding", False):
            continue
        task = str(source).rsplit("/", 1)[-1]
        for key, value in info.items():
            if key.startswith(("rewards/", "metrics/")) and value is not None:
                parts[f"env/{task}/{key}"].append(float(value))
    return {name: sum(v) / len(v) for name, v in parts.items()}


class EnvMetrics:
    """The environment's set of figures trainctl.runtime.verl_patches adds to the training log."""

    ENV = "TRAINCTL_ENV"
    # the verl functions it wraps (trainctl.runtime.verl_patches.METRIC_PATCHES)
    WRAPS = ("PPOTrainer.step", "PPOTrainer._compute_metrics")
    name = "env"

    def __init__(self, kind: str):
        self.kind = kind
        self.pending: dict[str, float] = {}

    def after_step(self, batch, global_steps: int) -> None:
        rewards = task_rewards(batch)
        self.pending = {f"env/{task}/reward": value for task, value in rewards.items()}
        if self.kind == "verifiers":
            self.pending.update(reward_parts(batch))
        if CURRICULUM is not None:
            CURRICULUM.update(rewards)
            self.pending.update({f"env/{task}/level": level for task, level in CURRICULUM.levels.items()})

    def step_metrics(self, batch, global_steps: int, metrics: dict) -> dict[str, float]:
        figures, self.pending = self.pending, {}
        return figures
