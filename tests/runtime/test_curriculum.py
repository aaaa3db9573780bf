"""env.curriculum in the trainer (trainctl.runtime.env_metrics.Levels, trainctl.runtime.curriculum): the rule that moves
a task's level, and verl's dataset over an environment's real rows, regenerating a moved task's rows at its level and
keeping the levels through torchdata's StatefulDataLoader state (what verl saves as a checkpoint's data.pt)."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from trainctl.envs import SPEC
from trainctl.envs import reasoning_gym as kind
from trainctl.runtime import env_metrics
from trainctl.runtime.env_metrics import Levels
from trainctl.runtime.rewards.reasoning_gym import compute_score


def test_a_level_moves_when_its_rolling_mean_crosses_a_threshold_and_its_window_starts_over():
    levels = Levels(tops={"a": 2, "b": 4}, window=3, raise_at=0.75, lower_at=0.25, start=1)
    assert levels.levels == {"a": 1, "b": 1}
    assert levels.update({"a": 1.0, "b": 0.0}) == {}
    assert levels.update({"a": 1.0, "b": 0.0, "c": 1.0}) == {}  # 2 steps of 3; a task it does not move is ignored
    assert levels.update({"a": 0.25, "b": 0.3}) == {"a": 2, "b": 0}  # means 0.75 and 0.1
    assert levels.update({"a": 1.0}) == {} and levels.update({"a": 1.0}) == {}  # a new window; b had no rows
    assert levels.update({"a": 1.0}) == {} and levels.levels["a"] == 2  # its top


def test_a_level_falls_only_with_lower_at_and_the_window_rolls_at_the_top():
    levels = Levels(tops={"a": 1}, window=2, raise_at=0.8, lower_at=0.2)
    assert levels.update({"a": 0.9}) == {} and levels.update({"a": 0.7}) == {"a": 1}  # mean 0.8
    assert levels.update({"a": 1.0}) == {} and levels.update({"a": 1.0}) == {}  # at the top
    assert levels.update({"a": 0.0}) == {}  # the last two: 1.0, 0.0
    assert levels.update({"a": 0.0}) == {"a": 0}
    rising = Levels(tops={"a": 3}, window=1, raise_at=0.5, start=2)
    assert rising.update({"a": 0.0}) == {} and rising.levels == {"a": 2}  # lower_at null: never down


def test_levels_and_windows_survive_their_state():
    levels = Levels(tops={"a": 4, "b": 4}, window=3, raise_at=0.5)
    levels.update({"a": 1.0, "b": 0.2})
    levels.update({"a": 1.0, "b": 0.2})
    levels.update({"a": 1.0, "b": 0.2})
    levels.update({"b": 0.9})
    state = json.loads(json.dumps(levels.state_dict()))  # plain data: torch.save and back
    again = Levels(tops={"a": 4, "b": 4}, window=3, raise_at=0.5)
    again.load_state_dict(state)
    assert again.levels == {"a": 1, "b": 0} and list(again.recent["b"]) == [0.2, 0.2, 0.9]
    assert again.update({"b": 0.9}) == {"b": 1}  # 0.2, 0.9, 0.9: its window went on where it was


@pytest.fixture
def env_rows(tmp_path):
    """An environment's real rows and settings as trainctl.envs.prepare writes them (two tasks, the curriculum on)."""
    from trainctl.data.writer import write_rows

    env = OmegaConf.create(
        {
            "tasks": ["spell_backward", {"name": "basic_arithmetic", "weight": 3}],
            "train_size": 32,
            "test_size": 8,
            "seed": 0,
            "system_prompt": None,
            "instruction": "Give only the final answer, as <answer>ANSWER</answer>.",
            "answer_tag": "answer",
            "answer_pattern": None,
            "curriculum": {"enabled": True, "window": 1, "raise_at": 0.5, "lower_at": None, "start_level": 0},
        }
    )
    folder = tmp_path / "rl"
    folder.mkdir()
    write_rows(folder / "train.parquet", kind.rows(env, "train"))
    write_rows(folder / "test.parquet", kind.rows(env, "test"))
    (folder / SPEC).write_text(json.dumps(OmegaConf.to_container(env)))
    return folder


def _dataset(folder, split="train"):
    from trainctl.runtime.curriculum import CurriculumDataset

    config = OmegaConf.create(
        {
            "train_files": str(folder / "train.parquet"),
            "val_files": str(folder / "test.parquet"),
            "prompt_key": "prompt",
            "max_prompt_length": 256,
            "filter_overlong_prompts": False,
            "cache_dir": str(folder / "cache"),
        }
    )
    files = config.train_files if split == "train" else config.val_files
    return CurriculumDataset(files, tokenizer=None, processor=None, config=config)


def test_a_moved_task_is_generated_at_its_level_and_the_levels_ride_in_the_dataloaders_state(env_rows, monkeypatch):
    from torchdata.stateful_dataloader import StatefulDataLoader
    from verl.utils.dataset.rl_dataset import collate_fn

    monkeypatch.setattr(env_metrics, "CURRICULUM", None)
    data = _dataset(env_rows)
    assert env_metrics.CURRICULUM is data.levels  # EnvMetrics moves these
    at_start = [data[i] for i in range(len(data))]
    arithmetic = [i for i, r in enumerate(at_start) if r["extra_info"]["task"] == "basic_arithmetic"]
    spelling = [i for i, r in enumerate(at_start) if r["extra_info"]["task"] == "spell_backward"]
    assert arithmetic and spelling and "level" not in at_start[0]["extra_info"]  # the rows as written

    data.levels.update({"basic_arithmetic": 1.0})  # window 1, raise_at 0.5: up one level
    assert data.levels.levels == {"spell_backward": 0, "basic_arithmetic": 1}
    two_terms, three_terms = (kind.at_level({"name": "basic_arithmetic", "settings": {}}, lv) for lv in (0, 1))
    assert (two_terms["max_terms"], three_terms["max_terms"]) == (2, 3)  # reasoning-gym's own levels
    for i in arithmetic:
        row = data[i]
        info, entry = row["extra_info"], json.loads(row["extra_info"]["entry"])
        assert info["level"] == 1 and info["index"] == at_start[i]["extra_info"]["index"]
        assert entry["metadata"]["num_terms"] <= 3 and row["raw_prompt"][-1]["content"].startswith(entry["question"])
        assert row["raw_prompt"] == row["prompt"] and row["data_source"] == "reasoning_gym/basic_arithmetic"
        right = compute_score(row["data_source"], f"<answer>{entry['answer']}</answer>", None, info)
        assert right["acc"] == 1.0  # reasoning-gym's scorer reads the new entry
    assert any(json.loads(data[i]["extra_info"]["entry"])["metadata"]["num_terms"] == 3 for i in arithmetic)
    assert all(data[i] == at_start[i] for i in spelling)  # a task that did not move is as written

    loader = StatefulDataLoader(data, batch_size=4, collate_fn=collate_fn, num_workers=0)
    next(iter(loader))
    state = loader.state_dict()
    monkeypatch.setattr(env_metrics, "CURRICULUM", None)
    resumed = StatefulDataLoader(_dataset(env_rows), batch_size=4, collate_fn=collate_fn, num_workers=0)
    assert resumed.dataset.levels.levels == {"spell_backward": 0, "basic_arithmetic": 0}
    resumed.load_state_dict(state)
    next(iter(resumed))
    assert resumed.dataset.levels.levels == {"spell_backward": 0, "basic_arithmetic": 1}
    assert env_metrics.CURRICULUM is resumed.dataset.levels

    held_out = _dataset(env_rows, "test")  # validation's rows stay at the start level
    assert held_out.levels is None and held_out.state_dict() == {}
