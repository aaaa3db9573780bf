"""What the server reads and decides without a server: metrics by offset, run summaries from the files' ends,
trajectories as turns (verl's flattened text and structured messages), the job fields on trainctl's keys."""

from __future__ import annotations

import json
import shutil

import pytest

from trainctl.runs.status import read_run
from trainctl.serve.events import Cursor
from trainctl.serve.reading import read_records, read_run_metrics, summary
from trainctl.serve.security import safe_path
from trainctl.serve.trajectories import trajectory, turns_from_messages, turns_from_text


def test_records_are_read_by_offset_and_a_cut_line_waits(tmp_path):
    f = tmp_path / "m.jsonl"
    f.write_text('{"step": 1, "data": {"a": 1}}\n{"step": 2, "data": {"a"')
    records, offset = read_records(f)
    assert records == [(1, {"a": 1})] and offset == f.read_text().index("\n") + 1
    with open(f, "a") as out:
        out.write(': 2}}\n{"step": 3, "metrics": {"a": 3}}\n')
    more, end = read_records(f, offset)
    assert more == [(2, {"a": 2}), (3, {"a": 3})] and end == f.stat().st_size
    assert str(Cursor(2, end, None)) == f"2.{end}.-" and Cursor.parse(f"2.{end}.7") == Cursor(2, end, 7)
    assert Cursor.parse("garbage") is None


def test_the_summary_from_the_files_ends_is_what_runs_ls_reads_whole(sft_run, grpo_run, dpo_run, tmp_path):
    for run in (sft_run, grpo_run, dpo_run):
        whole = read_run(run.path)
        s = summary(run.path, whole.family)
        assert (s.steps_done, s.headline) == (whole.steps_done, whole.headline), run.path.name
    resumed = tmp_path / "resumed"
    shutil.copytree(sft_run.path, resumed, ignore=shutil.ignore_patterns("checkpoints"))
    last = max(read_run_metrics(sft_run.path).steps)
    (resumed / "metrics" / "attempt-2.jsonl").write_text(f'{{"step": {last}, "data": {{"train/loss": 0.25}}}}\n')
    assert summary(resumed, "sft").headline == ("train/loss", 0.25) == read_run(resumed).headline
    assert read_run_metrics(resumed).steps[last]["train/loss"] == 0.25  # a resumed attempt's steps win


VERL_OUTPUT = (
    '<tool_call>\n{"name": "calculator", "arguments": {"expression": "6 * 3"}}\n</tool_call>\nuser\n'
    "<tool_response>\n18\n</tool_response>\nassistant\n"
    '<tool_call>\n{"name": "calculator", "arguments": {"expr": "1"}}\n</tool_call>\nuser\n'
    "<tool_response>\nError: unknown argument expr\n</tool_response>\nassistant\n#### 18"
)


def test_verl_flattened_text_becomes_turns():
    prompt, turns = turns_from_text("system\n<tools>...</tools>\nuser\nWhat is 6 * 3?\nassistant\n", VERL_OUTPUT)
    assert [t.role for t in prompt] == ["system", "user"] and prompt[1].text == "What is 6 * 3?"
    assert [t.role for t in turns] == ["assistant", "tool", "assistant", "tool", "assistant"]
    assert turns[0].tool_calls == [{"name": "calculator", "arguments": {"expression": "6 * 3"}}]
    assert turns[1].text == "18" and not turns[1].error and turns[3].error
    assert turns[4].text == "#### 18"
    t = trajectory({"input": "user\nWhat is 6 * 3?\nassistant\n", "output": VERL_OUTPUT, "score": 1.0, "step": 3}, 0)
    assert (t["tool_calls"], t["tool_errors"], t["reward"], t["prompt"]) == (2, 1, 1.0, "What is 6 * 3?")
    broken = trajectory({"input": "", "output": '<tool_call>\n{"name": "calc", "argu\n</tool_call>'}, 1)
    assert broken["turns"][0]["tool_calls"][0]["malformed"] and broken["tool_errors"] == 1


def test_structured_turns_are_used_as_they_are():
    messages = [
        {"role": "user", "content": "What is 6 * 3?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "calculator", "arguments": json.dumps({"expression": "6*3"})}}]},
        {"role": "tool", "content": "18"},
        {"role": "assistant", "content": "#### 18"},
    ]  # fmt: skip
    prompt, turns = turns_from_messages(messages)
    assert [t.role for t in prompt] == ["user"] and [t.role for t in turns] == ["assistant", "tool", "assistant"]
    assert turns[0].tool_calls == [{"name": "calculator", "arguments": {"expression": "6*3"}}]
    t = trajectory({"turns": messages, "input": "ignored", "output": "ignored", "score": 0.5}, 0)
    assert t["prompt"] == "What is 6 * 3?" and t["tool_calls"] == 1 and t["reward"] == 0.5


def test_safe_path(tmp_path):
    base = tmp_path / "run"
    (base / "logs").mkdir(parents=True)
    (base / "logs" / "a.log").write_text("x")
    (tmp_path / "secret").write_text("s")
    (base / "link").symlink_to(tmp_path / "secret")
    assert safe_path(base, "logs/a.log") == (base / "logs" / "a.log").resolve()
    for bad in ("../secret", "/etc/passwd", "logs/../../secret", "link", "logs\\a.log", "", "logs/", "a\x00b"):
        assert safe_path(base, bad) is None, bad
    assert safe_path(base, "logs/a.log", raw=b"logs%2fa.log") is None


def _words(fields, base, search):
    from trainctl.serve.planner import field_words

    return field_words(fields, base, search)


@pytest.mark.parametrize(
    "base, fields, expected",
    [
        (["recipe=quickstart"], {"learning_rate": 0.01, "batch_size": 64, "num_epochs": 2},
         ["run.epochs=2", "optim.lr=0.01", "data.train_batch_size=64"]),
        (["recipe=grpo-arith-tiny-cpu"], {"learning_rate": 1e-5, "rollout_n": 8, "kl_coef": 0.01, "num_gpus": 16},
         ["hardware.nnodes=2", "hardware.gpus_per_node=8", "actor_rollout_ref.actor.optim.lr=1e-05",
          "actor_rollout_ref.rollout.n=8", "actor_rollout_ref.actor.kl_loss_coef=0.01"]),
        (["algorithm=ppo"], {"kl_coef": 0.02},
         ["actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_loss_coef=0.02"]),
        (["recipe=dpo-arith-tiny-cpu"], {"kl_coef": 0.2, "learning_rate": 1e-6, "batch_size": 16},
         ["learning_rate=1e-06", "gradient_accumulation_steps=4", "beta=0.2"]),
        # every TRL trainer from its row in trainctl.facts.trl (a KeyError for all but DPO before)
        (["algorithm=kto"], {"kl_coef": 0.1, "learning_rate": 1e-6}, ["learning_rate=1e-06", "beta=0.1"]),
        (["algorithm=orpo"], {"kl_coef": 0.1}, ["beta=0.1"]),
        (["algorithm=rm"], {"learning_rate": 1e-5}, ["learning_rate=1e-05"]),
    ],
)  # fmt: skip
def test_job_fields_land_on_trainctl_keys(base, fields, expected, tmp_path):
    from trainctl.config.search import SearchPath

    folder = tmp_path / "model"  # a Hugging Face folder (not a run's checkpoint)
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    words, _notes, problems = _words({**fields, "model_path": str(folder), "name": "j"}, base, SearchPath.default())
    assert problems == []
    assert words[:2] == ["run.name=j", f"model.path={folder.resolve()}"]
    assert words[2:] == expected


def test_job_fields_that_do_not_apply_are_problems_naming_the_field():
    from trainctl.config.search import SearchPath

    _, _, problems = _words({"rollout_n": 4, "num_gpus": 12, "model_path": "nope"}, ["algorithm=sft"],
                            SearchPath.default())  # fmt: skip
    assert {p["key"] for p in problems} == {"rollout_n", "num_gpus", "model_path"}
    assert all(p["hint"] for p in problems)
    _, _, problems = _words({"kl_coef": 0.1, "rollout_n": 2}, ["algorithm=rm"], SearchPath.default())
    assert [p["key"] for p in problems] == ["rollout_n", "kl_coef"]  # a reward model has neither
    assert "algorithm rm (rm)" in problems[1]["message"]


def test_string_fields_stay_strings_in_the_overrides(tmp_path):
    """A name Hydra would read as a number (a valid run name), a path with a comma (a sweep to Hydra): quoted, so
    that the job gets exactly them (run.name=0 was the int 0: "run.name must be a string")."""
    from trainctl.config.search import SearchPath
    from trainctl.serve.planner import _load

    data = tmp_path / "a,b.parquet"
    fields = {"name": "0", "train_data_path": str(data)}
    words, _, problems = _words(fields, ["recipe=quickstart"], SearchPath.default())
    assert problems == [] and words == ["run.name='0'", f"data.train_files='{data}'"]
    cfg = _load(["recipe=quickstart", *words], SearchPath.default()).cfg
    assert (cfg.run.name, cfg.data.train_files) == ("0", str(data))


def test_a_run_as_model_path_trains_from_it(sft_run):
    from trainctl.config.search import SearchPath

    words, notes, problems = _words({"model_path": str(sft_run.path)}, ["recipe=quickstart"], SearchPath.default())
    assert (words, problems) == ([f"model={sft_run.path.resolve()}"], [])  # trainctl.ckpt.lineage's model=RUN
    assert "starts from it" in notes[0]
