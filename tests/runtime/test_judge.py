"""The judge's parts, outside a training run: answers parsed robustly, the built-in prompts, failures counted (a
request that times out, garbage from a real model served by `transformers serve`), groups that never fill."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

from trainctl.backends.rewards.judge import TEMPLATES_DIR
from trainctl.runtime import judge

TASK = [{"role": "user", "content": "What is 2 + 3?"}]


@pytest.mark.parametrize(
    ("answer", "n", "scores"),
    [
        ('{"scores": [{"id": 1, "explanation": "right", "score": 0.9}, {"id": 2, "explanation": "no", "score": 0}]}',
         2, [0.9, 0.0]),
        # prose and a code fence around it, ids out of order and as strings, a reasoning model's thoughts before it
        ('<think>{"scores": []}</think>Here you go:\n```json\n{"scores": [{"id": "2", "score": "0.25"}, '
         '{"id": "1", "score": 1}]}\n```', 2, [1.0, 0.25]),
        ('{"scores": {"1": 0.5, "2": 0.75}}', 2, [0.5, 0.75]),
        ("[0.1, 0.2, 0.3]", 3, [0.1, 0.2, 0.3]),
        ("Response 1: 0.8\nResponse 2: 0.3", 2, [0.8, 0.3]),
        # not a verdict: wrong count, an id twice, out of range, not a number, a stray list in prose, nothing
        ('{"scores": [{"id": 1, "score": 0.5}]}', 2, None),
        ('{"scores": [{"id": 1, "score": 0.5}, {"id": 1, "score": 0.4}]}', 2, None),
        ('{"scores": [{"id": 1, "score": 7}, {"id": 2, "score": 3}]}', 2, None),
        ('{"scores": [{"id": 1, "score": "good"}, {"id": 2, "score": 0.1}]}', 2, None),
        ("I would rate them [1, 0] overall", 2, None),
        ("\u00e9\u00fd 12 x 3 +", 2, None),
        ("", 2, None),
        (None, 2, None),
    ],
)  # fmt: skip
def test_group_answers_are_parsed_or_refused(answer, n, scores):
    assert judge.parse_group(answer, n) == scores


def test_single_answers_are_parsed_or_refused():
    assert judge.parse_single('{"explanation": "fine", "score": 0.7}') == 0.7
    assert judge.parse_single("The score: 0.4") == 0.4
    assert judge.parse_single("score 0.4, or maybe score 0.6") is None
    assert judge.parse_single('{"score": 1.5}') is None
    assert judge.parse_single("no idea") is None


@pytest.mark.parametrize("mode", ["group", "single"])
def test_the_built_in_prompts_show_the_task_and_every_response(mode):
    template = judge.load_template(str(TEMPLATES_DIR / f"{mode}.jinja"))
    responses = ["5", "It is 6."] if mode == "group" else ["5"]
    text = judge.render(template, TASK, responses, "correct answers win", "5")
    assert "What is 2 + 3?" in text and all(r in text for r in responses)
    assert "correct answers win" in text and "A reference answer, for your judgment only: 5" in text
    assert '"score"' in text and ('{"scores": [' in text) == (mode == "group")
    plain = judge.render(template, TASK, responses, None, None)
    assert "reference answer" not in plain and "Rubric: a response is better" in plain


def test_a_judge_that_never_answers_is_a_counted_timeout():
    with socket.socket() as listener:  # accepts connections, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"

        async def ask():
            client = judge.JudgeClient(url, "m", None, timeout_s=1.0, retries=0)
            return await client.ask("judge this", "group", 2)

        verdict = asyncio.run(ask())
    assert verdict.scores is None and verdict.failure == "timeout"
    assert 0.9 < verdict.seconds < 10


def _settings(tmp_path, **kw) -> dict:
    return {
        "kind": "judge",
        "run_dir": str(tmp_path / "run"),
        "url": None,
        "model": "m",
        "serve": False,
        "key_env": None,
        "template": str(TEMPLATES_DIR / "group.jinja"),
        "mode": "group",
        "rubric": None,
        "timeout_s": 60.0,
        "retries": 0,
        "max_tokens": 64,
        "temperature": 0.0,
        "concurrency": 4,
        "json_schema": True,
        "failure_score": 0.0,
        "group_wait_s": 60.0,
        **kw,
    }


def _score_group(hub: judge.JudgeHub, uid: str, responses: list[str], step: int = 1) -> list:
    async def run():
        return await asyncio.gather(*(hub.score(uid, i, step, TASK, r, "5") for i, r in enumerate(responses)))

    return asyncio.run(run())


def test_a_group_that_never_fills_is_judged_without_its_stragglers(tmp_path, tiny_model_dir):
    from tests.launch.judge_server import JudgeServer

    with JudgeServer(str(tiny_model_dir)) as server:
        hub = judge.JudgeHub(_settings(tmp_path, url=server.url, group_wait_s=1.0), group_size=3)
        results = _score_group(hub, "u1", ["The answer is 5.", "It is 6, I think."])
    assert server.records[0].responses == ["The answer is 5.", "It is 6, I think."]
    assert [score for score, _ in results] == server.records[0].scores and all(ok for _, ok in results)
    metrics = hub.metrics(1)
    assert metrics["reward/judge/calls"] == 1 and metrics["reward/judge/partial_groups"] == 1
    assert metrics["reward/judge/failures"] == 0 and hub.metrics(1)["reward/judge/calls"] == 0  # reported once


def test_a_local_judge_served_with_transformers_serve_answers_garbage_counted(tmp_path, tiny_model_dir):
    """No reward.url: the hub serves the judge itself. The tiny model's words are no verdict: counted, not fatal."""
    hub = judge.JudgeHub(
        _settings(tmp_path, model=str(tiny_model_dir), serve=True, failure_score=-1.0, max_tokens=8), group_size=2
    )
    try:
        assert hub.server is not None and hub.server.poll() is None
        results = _score_group(hub, "u1", ["5", "6"], step=3)
    finally:
        hub.shutdown()
    assert results == [(-1.0, False), (-1.0, False)]
    metrics = hub.metrics(3)
    assert metrics["reward/judge/failures"] == 1 and metrics["reward/judge/unparsed"] == 1
    (line,) = [json.loads(x) for x in (tmp_path / "run" / "reward" / "judge.jsonl").read_text().splitlines()]
    assert line["failure"] == "unparsed" and line["n"] == 2 and line["uid"] == "u1"
    hub.server.wait(timeout=30)


def test_the_hub_reads_its_key_from_the_environment_and_refuses_to_start_without(tmp_path, monkeypatch):
    monkeypatch.delenv("TEST_JUDGE_API_KEY", raising=False)
    with pytest.raises(RuntimeError, match="TEST_JUDGE_API_KEY is not set in the reward worker's environment"):
        judge.JudgeHub(_settings(tmp_path, url="http://127.0.0.1:9/v1", key_env="TEST_JUDGE_API_KEY"), 2)
    monkeypatch.setenv("TEST_JUDGE_API_KEY", "sk-abcdefgh")
    hub = judge.JudgeHub(_settings(tmp_path, url="http://127.0.0.1:9/v1", key_env="TEST_JUDGE_API_KEY"), 2)
    assert hub.client.client.api_key == "sk-abcdefgh"


def test_managers_load_the_way_verl_loads_them():
    """verl's importlib path (reward.reward_manager.module.path = pkg://...) finds both managers."""
    from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase
    from verl.utils.import_utils import load_extern_object

    from trainctl.backends.rewards import judge as judge_kind
    from trainctl.backends.rewards import model as model_kind

    for module, name in (judge_kind.MANAGER, model_kind.MANAGER):
        assert issubclass(load_extern_object(module_path=module, object_name=name), RewardManagerBase)
