"""reward=model and reward=judge for real on CPU: verl.trainer.main_ppo (GRPO, tiny model, 2 steps), one run per
kind. The reward model is the tiny one built by a fixture, its run (model_run, tests/launch/conftest.py) shared with
the GRPO LoRA test; the judge is the tiny model behind an OpenAI-compatible server on 127.0.0.1
(tests/launch/judge_server.py), and its run trains on tasks `trainctl data gen-tasks` generated for the calculator
(the generator: tests/data/task_generator.py, also on 127.0.0.1). The judge run's tests are in the slow suite (three
minutes: `make test-slow`); the judge's parsing, its timeouts and a judge served by
transformers are tested in tests/runtime/test_judge.py."""

from __future__ import annotations

import json

import pytest
import torch

from tests.conftest import invoke
from tests.data.task_generator import GARBAGE, TaskGenerator, tasks
from tests.launch.conftest import RUN, Run, own_home
from tests.launch.judge_server import JudgeServer

KEY_ENV = "TRAINCTL_TEST_JUDGE_API_KEY"
KEY = "sk-test-judge-9f8e7d6c5b4a"
# the judge's 3rd and 12th requests answer garbage, its 6th answers after the client's timeout
MISBEHAVE = {2: "garbage", 5: "slow", 11: "garbage"}
# a short prompt: the tiny model reads 1024 tokens at most
TEMPLATE = """Score each response to the task from 0 to 1, best highest.
Task: {{ messages[-1].content }}
{% for r in responses %}
<response id="{{ loop.index }}">
{{ r }}
</response>
{% endfor %}
Reply with JSON: {"scores": [{"id": 1, "explanation": "...", "score": 0.5}, ...]}
"""


# what the task generator answers (tests/data/task_generator.py): 4 answers of 8 tasks, one of garbage among them
GENERATED = [
    (
        200,
        tasks(
            *[
                (f"What is {3 + 8 * i} * {b}? Use the calculator.", 1 + i % 3, ["calculator"], None)
                for b in range(11, 19)
            ]
        ),
    )
    for i in range(4)
]
GENERATED.insert(2, (200, GARBAGE))


@pytest.fixture(scope="module")
def judge_run(tmp_path_factory, tiny_model_dir, arith_data_dir):
    """GRPO with reward=judge on tasks `trainctl data gen-tasks` generated for the calculator (issue 30): the rows
    run through verl's tool agent loop with the calculator server, and the judge ranks each group, no ground truth."""
    root = tmp_path_factory.mktemp("reward-judge")
    template = root / "judge.jinja"
    template.write_text(TEMPLATE)
    with own_home(root, tiny_model_dir, arith_data_dir) as (home, work, mp):
        mp.setenv(KEY_ENV, KEY)
        with TaskGenerator(list(GENERATED)) as generator:
            made = invoke(
                "data", "gen-tasks", "judge-tasks", "tools=calculator", "model=tiny", "-n", "24", "--url",
                generator.url, "--generator", "task-writer", "--test-share", "0.25",
            )  # fmt: skip
        assert made.exit_code == 0, made.output
        assert made.stdout.startswith("24 tasks kept of 24 wanted (4 requests, 0 failed; 1 malformed answers")
        with JudgeServer(str(home / "models" / "tiny"), MISBEHAVE.get, slow_s=12) as server:
            dump = root / "dump"
            result = invoke(
                "train", *RUN, "run.name=judge", "data=judge-tasks", "tools=calculator", "data.max_prompt_length=192",
                "data.max_response_length=48", "tools.max_tool_response_length=16", "reward=judge",
                "reward.judge=tiny", f"reward.url={server.url}", f"reward.key_env={KEY_ENV}",
                f"reward.template={template}", "reward.timeout_s=8", "reward.retries=0",
                f"trainer.rollout_data_dir={dump}",
            )  # fmt: skip
    return Run(result, work / "runs" / "judge", dump, home), server


# -- reward=model -------------------------------------------------------------------------------------------------


# the reward-model run is a verl start of its own (two minutes in the suite): slow, like the judge's. The default
# suite checks reward=model's translation (tests/backends/rewards/test_model.py) and its scorer
# (tests/runtime/test_reward_model.py); CI runs both suites (.ci/run)
@pytest.mark.slow
def test_a_reward_model_run_trains_and_logs_its_reward(model_run):
    assert model_run.result.exit_code == 0, model_run.result.output[-4000:]
    metrics = model_run.metrics
    assert sorted(metrics) == [1, 2]
    for step, m in metrics.items():
        assert m["reward/model/mean"] == pytest.approx(m["critic/score/mean"], abs=1e-5)
        assert m["reward/model/std"] > 0, "a random reward model scores responses differently"
        # GRPO learns from differences within each prompt's group
        assert m["critic/advantages/max"] > 0.5 and m["critic/advantages/min"] < -0.5, step
    backend = (model_run.dir / "verl_ppo.yaml").read_text()
    assert "path: pkg://trainctl.runtime.reward_model" in backend and "name: SequenceClassifierRewardManager" in backend


@pytest.mark.slow
def test_logged_rewards_are_what_the_reward_model_scores(model_run, tiny_reward_model_dir, arith_data_dir):
    """Recompute rewards on their own: the row's prompt and the sampled response through the reward model's chat
    template, one at a time, with transformers."""
    import pyarrow.parquet as pq
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_reward_model_dir)
    rm = AutoModelForSequenceClassification.from_pretrained(tiny_reward_model_dir).eval()
    rows = pq.read_table(arith_data_dir / "rl" / "train.parquet").to_pylist()

    def shown(messages):  # the prompt as verl's dump writes it: generation prompt on, special tokens off
        text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return tok.decode(tok(text, add_special_tokens=False)["input_ids"], skip_special_tokens=True)

    prompts = {shown(list(r["prompt"])): list(r["prompt"]) for r in rows}
    samples = model_run.samples()
    assert len(samples) == 2 * 8 * 4  # 2 steps x 8 prompts x rollout.n 4
    checked = 0
    for sample in samples[::5]:
        chat = [*prompts[sample["input"]], {"role": "assistant", "content": sample["output"]}]
        text = tok.apply_chat_template(chat, tokenize=False)
        with torch.inference_mode():
            expected = rm(**tok(text, add_special_tokens=False, return_tensors="pt")).logits[0, 0].item()
        assert sample["score"] == pytest.approx(expected, abs=1e-4), sample["uid"]
        checked += 1
    assert checked >= 10


# -- reward=judge -------------------------------------------------------------------------------------------------


def grpo_advantages(scores: list[float]) -> list[float]:
    """verl's GRPO outcome advantage: (score - group mean) / (group std, unbiased, + 1e-6)."""
    t = torch.tensor(scores)
    return ((t - t.mean()) / (t.std() + 1e-6)).tolist()


@pytest.mark.slow
def test_a_judge_run_trains_and_counts_the_judges_failures(judge_run):
    run, server = judge_run
    assert run.result.exit_code == 0, run.result.output[-4000:]
    # the generated tasks, through the tool agent loop: the calculator's schema in every prompt the judge was shown
    samples = run.samples()
    assert all("Use the calculator." in s["input"] and '"name": "calculator"' in s["input"] for s in samples)
    metrics = run.metrics
    assert sorted(metrics) == [1, 2]
    assert [metrics[s]["reward/judge/calls"] for s in (1, 2)] == [8, 8]  # one per prompt: groups of rollout.n
    assert server.probes == 1, "trainctl probed the endpoint once before the run"
    assert len(server.records) == 16
    done = {b: sum(r.behaviour == b for r in server.records) for b in ("garbage", "slow")}
    assert done == {"garbage": 2, "slow": 1}
    total = {k: sum(metrics[s][f"reward/judge/{k}"] for s in (1, 2)) for k in ("failures", "unparsed", "timeouts")}
    assert total == {"failures": 3, "unparsed": 2, "timeouts": 1}
    lines = [json.loads(line) for line in (run.dir / "reward" / "judge.jsonl").read_text().splitlines()]
    assert len(lines) == 16 and sum(line["failure"] is not None for line in lines) == 3


@pytest.mark.slow
def test_the_judges_group_relative_scores_reach_the_advantages(judge_run):
    run, server = judge_run
    assert run.result.exit_code == 0, run.result.output[-4000:]
    samples = run.samples()
    groups: dict[tuple[int, str], list[dict]] = {}
    for sample in samples:
        groups.setdefault((sample["step"], sample["uid"].rsplit("_", 2)[0]), []).append(sample)
    assert len(groups) == 16 and all(len(g) == 4 for g in groups.values())
    verdicts = {tuple(sorted(r.responses)): r for r in server.records}
    judged_groups = 0
    for group in groups.values():
        record = verdicts[tuple(sorted(s["output"] for s in group))]  # the request that showed these responses
        if record.scores is None:  # garbage or too late: the failure score, counted above
            assert all(s["score"] == 0.0 for s in group)
            continue
        judged_groups += 1
        for s in group:
            assert s["score"] == pytest.approx(record.scores[record.responses.index(s["output"])])
    assert judged_groups == 13
    metrics = run.metrics
    for step in (1, 2):
        advantages = [
            a for (st, _), g in groups.items() if st == step for a in grpo_advantages([s["score"] for s in g])
        ]
        assert max(advantages) > 0, "some group's judge scores differ"
        assert metrics[step]["critic/advantages/max"] == pytest.approx(max(advantages), abs=1e-4)
        assert metrics[step]["critic/advantages/min"] == pytest.approx(min(advantages), abs=1e-4)
        assert metrics[step]["reward/judge/mean"] == pytest.approx(
            sum(s["score"] for s in samples if s["step"] == step) / 32, abs=1e-5
        )


@pytest.mark.slow
def test_the_judges_key_is_never_written(judge_run):
    run, _ = judge_run
    for f in run.dir.rglob("*"):
        if f.is_file() and f.stat().st_size < 50_000_000:
            assert KEY.encode() not in f.read_bytes(), f
    assert f"key_env: {KEY_ENV}" in (run.dir / "verl_ppo.yaml").read_text()
