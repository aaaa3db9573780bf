"""env=verifiers (issue 55): a single-turn verifiers taskset (tests/envs/fixtures/verifiers/vf_arith.py, two rewards)
as a run's rows and scoring, through verifiers' own interpreter. Its rows and per-reward scores against verifiers'
own Task.score there; every bad input refused before anything is written; `trainctl env install/ls/show`; and a real
2-step GRPO run of the tiny model on it (slow)."""

from __future__ import annotations

import json
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from omegaconf import OmegaConf

from tests.envs.conftest import FIXTURES, in_verifiers
from tests.real_runs import train

# vf_arith has 40 tasks (its config's default size): 8 held out
TASKSET = ["env=verifiers", "env.id=vf_arith", f"env.path=[{FIXTURES}]", "env.test_size=8"]

# verifiers' own reading, in its interpreter: each task as the taskset's load() yields it (not rebuilt from a row),
# a one-turn trace of each response, and Task.score on it
REFERENCE = """
import asyncio, json, sys
import verifiers.v1 as vf
from verifiers.v1.graph import MessageNode
from verifiers.v1.trace import AgentInfo, TraceTask
from verifiers.v1.types import AssistantMessage, SystemMessage, UserMessage
from verifiers.v1.utils.loaders import load_taskset, taskset_config_type

config = taskset_config_type("vf_arith").model_validate({"id": "vf_arith", "size": 40})
responses = json.loads(sys.argv[1])  # task key -> the responses to score

async def main():
    out = {}
    for task in load_taskset(config):
        for response in responses.get(task.key, []):
            trace = vf.Trace(
                task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
                agent=AgentInfo(config=vf.AgentConfig()),
                nodes=[
                    MessageNode(message=SystemMessage(content=task.data.system_prompt)),
                    MessageNode(parent=0, message=UserMessage(content=task.data.prompt)),
                    MessageNode(parent=1, message=AssistantMessage(content=response), sampled=True),
                ],
            )
            await task.score(trace)
            out.setdefault(task.key, []).append(
                {"prompt": [task.data.system_prompt, task.data.prompt], "reward": trace.reward,
                 "rewards": {k: r.score for k, r in trace.rewards.items()}}
            )
    print(json.dumps(out))

asyncio.run(main())
"""


def task_score(venv, responses: dict[str, list[str]]) -> dict[str, list[dict]]:
    """verifiers' own scores (REFERENCE) of responses to vf_arith's tasks, by task key."""
    return in_verifiers(venv, REFERENCE, responses)


def _env(**over):
    base = {
        "id": "vf_arith", "args": {"size": 40}, "path": [str(FIXTURES)], "tasks": [], "train_size": 30,
        "test_size": 8, "seed": 0, "curriculum": {"enabled": False},
    }  # fmt: skip
    return OmegaConf.create({**base, **over})


def test_rows_and_per_reward_scores_equal_verifiers_own_task_score(with_verifiers):
    from trainctl.envs import verifiers as kind
    from trainctl.runtime.rewards import verifiers as scorer

    env = _env()
    assert kind.problems(env) == []
    train_rows, test_rows = list(kind.rows(env, "train")), list(kind.rows(env, "test"))
    assert len(train_rows) == 30 and len(test_rows) == 8  # 40 tasks: 8 held out, 30 of the other 32 to train
    keys = [r["extra_info"]["key"] for r in train_rows + test_rows]
    assert len(set(keys)) == 38, "no task in both splits"
    rows = train_rows[:6] + test_rows[:2]
    responses: dict[str, list[str]] = {}
    for r in rows:
        data = json.loads(r["extra_info"]["data"])
        responses[r["extra_info"]["key"]] = [
            f"so <answer>{data['answer']}</answer>",
            "<answer>-1</answer>",
            str(data["answer"]),
        ]
    own = task_score(with_verifiers, responses)

    calls = [(r, i, response) for r in rows for i, response in enumerate(responses[r["extra_info"]["key"]])]
    with ThreadPoolExecutor(8) as pool:  # as verl's reward loop calls it: many responses at once, one worker
        got = list(pool.map(lambda c: scorer.compute_score(c[0]["data_source"], c[2], "", c[0]["extra_info"]), calls))
    assert len(scorer._WORKERS) == 1
    seen = set()
    for (row, i, _), scores in zip(calls, got, strict=True):
        expected = own[row["extra_info"]["key"]][i]
        assert [m["content"] for m in row["prompt"]] == expected["prompt"]
        assert row["data_source"] == "verifiers/vf_arith"
        assert scores == {"score": expected["reward"], **{f"rewards/{k}": v for k, v in expected["rewards"].items()}}
        seen.add(scores["score"])
    assert seen == {1.5, 0.5, 0.0}  # right (1 + 0.5 x tagged), wrong but tagged, untagged
    scorer.close_all()


# (overrides, the lines the error must hold)
BAD = {
    "a taskset module that is not there": (
        ["env.id=vf_nope"],
        [
            "env.id = 'vf_nope': the taskset's module does not import in verifiers' interpreter:",
            "taskset 'vf_nope' not found",
        ],
    ),
    "a taskset whose own import fails": (
        ["env.id=vf_broken"],
        ["does not import in verifiers' interpreter: ModuleNotFoundError: No module named 'a_package_nobody_installed'",
         "vf_broken.py:3)"],
    ),
    "a reward that needs a runtime": (
        ["env.id=vf_needs_runtime"],
        [
            "vf_needs_runtime (SandboxTask): reward 'file_written' needs a runtime (its `runtime` parameter has no",
            "verifiers' Task.score would skip it without a word",
            "Hint: give it `runtime=None`",
        ],
    ),
    "arguments its config refuses": (
        ["env.args={sise:3}"],
        ["env.args = {'sise': 3}: vf_arith's taskset config refuses them:", "sise", "Extra inputs are not permitted"],
    ),
    "a held-out split as large as the taskset": (
        ["env.args={size:6}"],
        ["env.test_size = 8: vf_arith has 6 tasks, and the held-out split would leave none to train on."],
    ),
    "no env.id": (["env.id=null"], ["env=verifiers needs env.id: the taskset's module"]),
    "a curriculum": (["env.curriculum.enabled=true"], ["a verifiers taskset has none."]),
    "a format credit": (["env.format_score=0.1"], ["env.format_score = 0.1: a format credit is reasoning_gym's"]),
}  # fmt: skip


# each of these starts verifiers' interpreter for the taskset's checks (3-4 s of CPU on a quiet machine): the default
# suite keeps the module that is not there and the reward that needs a runtime, the rest run in the slow one
SLOW_CASES = {
    "a taskset whose own import fails",
    "arguments its config refuses",
    "a held-out split as large as the taskset",
}


@pytest.mark.parametrize(
    "case", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW_CASES else c for c in sorted(BAD)]
)
def test_bad_input_is_one_message_before_anything_is_written(case, cli, isolated, with_verifiers):
    words, lines = BAD[case]
    result = cli("config", "validate", "algorithm=grpo", *TASKSET, *words)
    assert result.exit_code == 1, result.output
    said = " ".join(result.stderr.split())
    for line in lines:
        assert " ".join(line.split()) in said, said
    assert not (isolated / "data").exists(), "nothing written"


def test_a_taskset_that_is_nowhere_is_answered_before_verifiers_is_imported(verifiers_venv):
    """A typo in env.id costs no import of verifiers (4-5 s of CPU); a taskset on the path or one verifiers ships is
    found as its loaders find it."""
    from trainctl.envs.verifiers import WORKER

    script = (
        "import contextlib, io, json, sys\n"
        f"sys.path.insert(0, {str(WORKER.parent)!r})\n"
        "import verifiers_worker as w\n"
        "found = {m: w._findable(m) for m in ('vf_arith', 'harbor', 'vf_nope', 'vf_nope.sub', 'vf_broken.sub')}\n"
        "with contextlib.redirect_stdout(io.StringIO()) as said:\n"
        "    try:\n"
        "        w.load({'id': 'owner/vf-nope@1', 'args': {}})\n"
        "    except SystemExit as e:\n"
        "        found['exit'] = e.code\n"
        "print(json.dumps({**found, 'said': json.loads(said.getvalue()), 'imported': 'verifiers' in sys.modules}))\n"
    )
    said = in_verifiers(verifiers_venv, script, {})
    error = {"error": "taskset 'owner/vf-nope@1' not found (tried to import 'vf_nope')", "stage": "import"}
    # vf_broken is there but its import fails: verifiers' loaders report it, naming the missing dependency
    assert said == {"vf_arith": True, "harbor": True, "vf_nope": False, "vf_nope.sub": False, "vf_broken.sub": True,
                    "exit": 2, "said": error, "imported": False}  # fmt: skip


def test_without_its_interpreter_a_plan_names_the_install_command(cli, isolated, monkeypatch, tmp_path):
    from trainctl.envs import verifiers as kind

    monkeypatch.setenv(kind.VENV_VAR, str(tmp_path / "nowhere"))
    result = cli("train", "recipe=grpo-arith-tiny-cpu", *TASKSET, "--dry-run")
    assert result.exit_code == 1, result.output
    said = " ".join(result.stderr.split())
    assert "env=verifiers runs verifiers in its own interpreter" in said and "none is installed here." in said
    assert f"looked in: {tmp_path / 'nowhere'}, {isolated / 'envs' / 'verifiers-0.4.0'}" in said
    assert "Hint: trainctl env install verifiers" in said
    assert not (isolated / "data").exists() and not (isolated / "runs").exists()
    dry = cli("env", "install", "verifiers", "--dry-run")
    # where plans look first: TRAINCTL_VERIFIERS_VENV's folder
    assert dry.exit_code == 0 and f"at {tmp_path / 'nowhere'}: not installed" in dry.stdout
    assert "-m pip install --disable-pip-version-check --progress-bar off verifiers==0.4.0" in dry.stdout
    assert not (isolated / "envs").exists() and not (tmp_path / "nowhere").exists(), "a dry run makes nothing"
    monkeypatch.delenv(kind.VENV_VAR)
    home = cli("env", "install", "verifiers", "--dry-run")
    assert f"at {isolated / 'envs' / 'verifiers-0.4.0'}: not installed" in home.stdout  # else the home's
    assert "verifiers: not installed (trainctl env install verifiers)" in cli("env", "ls").stdout


def test_a_plan_writes_the_rows_once_and_env_ls_and_show_find_the_taskset(cli, isolated, with_verifiers):
    plan = cli("train", "recipe=grpo-arith-tiny-cpu", *TASKSET, "--dry-run")
    assert plan.exit_code == 0, plan.output
    (folder,) = (isolated / "data" / "env").iterdir()
    train_file = folder / "rl" / "train.parquet"
    stamp = train_file.stat().st_mtime_ns
    assert cli("config", "validate", "recipe=grpo-arith-tiny-cpu", *TASKSET).exit_code == 0
    assert train_file.stat().st_mtime_ns == stamp  # found, not written again
    assert f"verifiers: verifiers==0.4.0 at {with_verifiers}" in cli("env", "ls").stdout
    show = cli("env", "show", f"verifiers:vf_needs_runtime:{FIXTURES}", "-n", "1")
    assert show.exit_code == 0, show.output
    assert "reward file_written weight 2 (needs a runtime: refused)" in show.stdout
    assert "user: Write 0 to /tmp/out.txt" in show.stdout


@pytest.mark.slow
def test_grpo_trains_two_steps_on_a_verifiers_taskset_and_eval_scores_its_held_out_split(real_home, verifiers_venv):
    """The tiny recipe on vf_arith for 2 steps through verl's loop: its rewards logged per step, each reward too; then
    `trainctl eval` of the run scores the taskset's held-out split, each sample as verifiers' Task.score does."""
    from trainctl.metrics import read_metrics

    started = time.monotonic()
    dumps = real_home.root / "grpo-vf-rollouts"
    run = train(
        real_home, "grpo-vf", "recipe=grpo-arith-tiny-cpu", *TASKSET, "run.max_steps=2", "logger=console",
        f"verl.trainer.rollout_data_dir={dumps}", check_first=False, TRAINCTL_VERIFIERS_VENV=str(verifiers_venv),
    )  # fmt: skip
    print(f"2 GRPO steps on vf_arith: {time.monotonic() - started:.0f} s")
    # the scores the run trained on are verifiers' Task.score of the same responses (the dump: each response, its
    # task's key as the ground truth, and its score)
    dumped = [json.loads(line) for step in (1, 2) for line in (dumps / f"{step}.jsonl").read_text().splitlines()]
    assert len(dumped) == 2 * 8 * 8  # 2 steps of 8 prompts x 8 samples
    responses: dict[str, list[str]] = {}
    for d in dumped:
        responses.setdefault(d["gts"], []).append(d["output"])
    own = task_score(verifiers_venv, responses)
    for key in responses:
        logged = [d["score"] for d in dumped if d["gts"] == key]
        assert logged == [o["reward"] for o in own[key]], key
    metrics = read_metrics(run.path)
    for step in (1, 2):
        for name in ("env/vf_arith/reward", "env/vf_arith/rewards/correct", "env/vf_arith/rewards/tagged"):
            assert name in metrics[step], sorted(metrics[step])
        # the total is verifiers' weighted sum of the two
        total = metrics[step]["env/vf_arith/rewards/correct"] + 0.5 * metrics[step]["env/vf_arith/rewards/tagged"]
        assert metrics[step]["env/vf_arith/reward"] == pytest.approx(total)

    from tests.real_runs import trainctl

    done = subprocess.run(
        trainctl("eval", str(run.path), "--limit", "8", "n=2", "temperature=1.0"), cwd=run.work,
        env=real_home.env(TRAINCTL_VERIFIERS_VENV=str(verifiers_venv)), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-3000:]
    assert "reward=env" in said and "step 2        8" in said, said[-3000:]
    samples = [json.loads(line) for line in (run.path / "eval/samples/env/step-2.jsonl").read_text().splitlines()]
    assert len(samples) == 8 * 2 and {s["data_source"] for s in samples} == {"verifiers/vf_arith"}
    held_out: dict[str, list[str]] = {}
    for s in samples:
        held_out.setdefault(s["ground_truth"], []).append(s["response"])
    assert not set(held_out) & set(responses), "the held-out split's tasks are not the train split's"
    own = task_score(verifiers_venv, held_out)
    for key in held_out:
        assert [s["reward"] for s in samples if s["ground_truth"] == key] == [o["reward"] for o in own[key]], key


def test_install_writes_only_into_a_folder_of_its_own(cli, tmp_path):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    result = cli("env", "install", "verifiers", "--path", str(foreign))
    assert result.exit_code == 1 and "holds something trainctl did not make" in result.stderr
    assert (foreign / "notes.txt").read_text() == "keep"
