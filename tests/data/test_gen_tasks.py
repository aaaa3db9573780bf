"""`trainctl data gen-tasks` (issue 30) against an OpenAI-compatible generator on 127.0.0.1 run by the test
(tests/data/task_generator.py): the calculator MCP server (stdio) listed for real, the generator's garbage, HTTP
errors, duplicates and malformed entries counted and skipped, the kept tasks split and written as RL rows that
data=NAME composes; the key goes to the endpoint and nowhere else. Training 2 GRPO steps on such rows with
reward=judge is tests/launch/test_reward.py's judge run."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from tests.data.task_generator import GARBAGE, TaskGenerator
from trainctl.data import gentasks

KEY = "sk-gen-test-4b3c2d1e"


def test_gen_tasks_writes_distinct_rated_tasks_and_counts_what_it_skipped(cli, tiny_model, isolated, monkeypatch):
    monkeypatch.setenv("TEST_GEN_KEY", KEY)
    with TaskGenerator() as server:
        result = cli(
            "data", "gen-tasks", "calc-tasks", "tools=calculator", "model=tiny", "-n", "8", "--per-request", "4",
            "--url", server.url, "--generator", "task-writer", "--key-env", "TEST_GEN_KEY", "--test-share", "0.25",
        )  # fmt: skip
    assert result.exit_code == 0, result.output[-3000:]
    out = result.stdout
    assert "8 tasks kept of 8 wanted (6 requests, 1 failed; 1 malformed answers and 3 malformed tasks skipped" in out
    assert "Split: 6 train, 2 test; 6 with a known answer" in out
    assert "Difficulty: 1: 1, 2: 4, 3: 2, 4: 1" in out and "Tool coverage: calculator 8" in out

    # what the generator was asked: the calculator's schema from the real server, with the key as the bearer
    asked = server.requests[0]
    assert asked["authorization"] == f"Bearer {KEY}" and asked["body"]["model"] == "task-writer"
    text = asked["body"]["messages"][0]["content"]
    assert '"name": "calculator"' in text and "Write 4 different tasks" in text
    assert asked["body"]["response_format"]["json_schema"]["name"] == "tasks"
    later = server.requests[-1]["body"]["messages"][0]["content"]
    assert "Do not repeat these tasks:" in later, "later requests are shown the tasks kept so far"

    folder = isolated / "data" / "calc-tasks"
    train = pq.read_table(folder / "rl" / "train.parquet").to_pylist()
    test = pq.read_table(folder / "rl" / "test.parquet").to_pylist()
    assert (len(train), len(test)) == (6, 2)
    texts = [r["prompt"][0]["content"] for r in train + test]
    assert len({gentasks.normalise(t) for t in texts}) == 8
    assert sum("17 * 23" in t or "17*23" in t for t in texts) == 1, "one of the four ways to ask it"
    for r in train + test:
        assert r["agent_name"] == "tool_agent" and r["data_source"] == gentasks.DATA_SOURCE
        assert r["extra_info"]["difficulty"] in range(1, 6) and set(r["extra_info"]["tools"]) <= {"calculator"}
    report = json.loads((folder / "gen-tasks.json").read_text())["report"]
    assert report["exact_duplicates"] + report["near_duplicates"] == 3 and report["failed_requests"] == 1

    # the data option: data=calc-tasks composes with the rows' folder, for the tool loop and an LLM judge
    option = isolated.parent / "work" / "conf" / "data" / "calc-tasks.yaml"  # ./conf: searched by every command
    assert option.read_text().startswith("# calc-tasks: 8 tasks generated")
    shown = cli("config", "show", "algorithm=grpo", "data=calc-tasks", "tools=calculator", "model=tiny", "reward=judge",
                "reward.judge=tiny", "reward.url=http://127.0.0.1:9/v1")  # fmt: skip
    assert shown.exit_code == 0, shown.output
    assert f"train_files: {folder}/rl/train.parquet" in shown.stdout

    for path in [*folder.rglob("*"), option]:
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), f"the key is in {path}"
    assert KEY not in result.output


def test_gen_tasks_without_tools_or_with_a_dead_generator_says_so(cli, tiny_model, isolated):
    no_tools = cli("data", "gen-tasks", "x", "--url", "http://127.0.0.1:9/v1", "--generator", "m")
    assert no_tools.exit_code == 2 and "no tools are chosen" in no_tools.output
    assert "tools=calculator" in no_tools.output

    dead = cli("data", "gen-tasks", "x", "tools=calculator", "model=tiny", "--url", "http://127.0.0.1:9/v1",
               "--generator", "m", "-n", "2")  # fmt: skip
    assert dead.exit_code == 1 and "failed every request" in dead.output, dead.output
    assert not (isolated / "data" / "x").exists(), "nothing written"

    # a local model served here (the random tiny one writes no JSON): its answers counted, nothing written
    local = cli("data", "gen-tasks", "x", "tools=calculator", "model=tiny", "--generator", "tiny", "-n", "2",
                "--max-requests", "2")  # fmt: skip
    assert local.exit_code == 1, local.output
    assert "Asking tiny at http://127.0.0.1:" in local.stderr
    assert "no usable task (2 requests: 2 malformed answers, 0 malformed tasks, 0 failed)" in local.output
    assert not (isolated / "data" / "x").exists()

    unset = cli("data", "gen-tasks", "x", "tools=calculator", "--url", "http://127.0.0.1:9/v1", "--generator", "m",
                "--key-env", "TRAINCTL_NO_SUCH_KEY")  # fmt: skip
    assert unset.exit_code == 2 and "export TRAINCTL_NO_SUCH_KEY=" in unset.output


@pytest.mark.parametrize(
    ("answer", "tasks", "malformed_answers", "malformed_tasks"),
    [
        (GARBAGE, 0, 1, 0),
        ('{"tasks": "none"}', 0, 1, 0),
        ('Here you go: {"tasks": [{"task": "Add 2 and 2", "difficulty": 1, "tools": ["calculator"]}]} Enjoy!', 1, 0, 0),
        ('[{"task": "Add 2 and 2", "difficulty": "3", "tools": []}, {"task": "x", "difficulty": 0}]', 1, 0, 1),
        (None, 0, 1, 0),
    ],
)
def test_answers_are_read_leniently_and_what_is_not_a_task_is_counted(
    answer, tasks, malformed_answers, malformed_tasks
):
    parsed = gentasks.parse(answer, ["calculator"])
    assert (len(parsed.tasks), parsed.malformed_answers, parsed.malformed_tasks) == (
        tasks,
        malformed_answers,
        malformed_tasks,
    )


def test_near_duplicates_are_dropped_and_distinct_tasks_kept():
    d = gentasks.Deduplicator()
    keep = [
        "What is 17 * 23? Use the calculator.",
        "what is 17*23?  USE THE CALCULATOR!",  # the same, normalised
        "What is 17 * 23? Use the calculator tool.",  # nearly the same words, the same numbers
        "What is 17 * 24? Use the calculator.",  # another task: other numbers, another answer
        "How many seconds are in 3 days?",
    ]
    kept = [d.add(gentasks.Task(t, 1, [])) for t in keep]
    assert kept == [True, False, False, True, True] and (d.exact, d.near) == (1, 1)
