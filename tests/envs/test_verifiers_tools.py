"""env=verifiers with a taskset's toolsets (issue 55): tools=verifiers serves them from verifiers' own interpreter as
one MCP server on stdio, trainctl's MCP client calls them, and the taskset's rewards score the whole trajectory (tool
calls and results) as verifiers' Task.score does. tests/envs/fixtures/verifiers/vf_tools.py (a calculator toolset,
two rewards that read the trajectory) and vf_stateful_tools.py (toolsets one server cannot stand for); a 2-step GRPO
run of tiny-tools on vf_tools (slow)."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from tests.envs.conftest import FIXTURES, in_verifiers
from tests.real_runs import train, trainctl

TOOLS_TASKSET = ["env=verifiers", "env.id=vf_tools", f"env.path=[{FIXTURES}]", "env.test_size=8", "tools=verifiers"]

# verifiers' own reading, in its interpreter, built here and not by trainctl's worker: each task as vf_tools' load()
# yields it, a trace of each trajectory's messages (each tool call with an id, each result answering it), and
# Task.score on it
REFERENCE = """
import asyncio, json, sys
import verifiers.v1 as vf
from verifiers.v1.graph import MessageNode
from verifiers.v1.trace import AgentInfo, TraceTask
from verifiers.v1.types import AssistantMessage, ToolCall, ToolMessage, UserMessage
from verifiers.v1.utils.loaders import load_taskset, taskset_config_type

config = taskset_config_type("vf_tools").model_validate({"id": "vf_tools"})
trajectories = json.loads(sys.argv[1])  # task key -> trajectories (lists of turns) to score

def message(turn, calls):
    if turn["role"] == "user":
        return UserMessage(content=turn["content"])
    if turn["role"] == "tool":
        return ToolMessage(tool_call_id=calls.pop(0), content=turn["content"])
    made = [ToolCall(id=f"c{len(calls)}-{i}", name=c["name"], arguments=json.dumps(c["arguments"]))
            for i, c in enumerate(turn.get("tool_calls") or [])]
    calls.extend(c.id for c in made)
    return AssistantMessage(content=turn["content"], tool_calls=made or None)

async def main():
    out = {}
    for task in load_taskset(config):
        for turns in trajectories.get(task.key, []):
            calls, nodes = [], []
            for turn in turns:
                nodes.append(MessageNode(parent=len(nodes) - 1 if nodes else None, message=message(turn, calls),
                                         sampled=turn["role"] == "assistant"))
            trace = vf.Trace(task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
                             agent=AgentInfo(config=vf.AgentConfig()), nodes=nodes)
            await task.score(trace)
            out.setdefault(task.key, []).append(
                {"reward": trace.reward, "rewards": {k: r.score for k, r in trace.rewards.items()},
                 "metrics": dict(trace.metrics)})
    print(json.dumps(out))

asyncio.run(main())
"""


def task_score(venv, trajectories: dict[str, list[list[dict]]]) -> dict[str, list[dict]]:
    """verifiers' own scores (REFERENCE) of trajectories of vf_tools' tasks, by task key."""
    return in_verifiers(venv, REFERENCE, trajectories)


def trajectory(question: str, expression: str | None, result: str | None, final: str) -> list[dict]:
    turns = [{"role": "user", "content": question}]
    if expression is not None:
        call = {"name": "calculator", "arguments": {"expression": expression}}
        turns += [{"role": "assistant", "content": "", "tool_calls": [call]}, {"role": "tool", "content": result}]
    return [*turns, {"role": "assistant", "content": final}]


def test_whole_trajectories_score_as_verifiers_task_score(with_verifiers):
    """The scorer a run calls (reward=env), given a trajectory's turns as the tool loop hands them to it: each reward
    and metric equals verifiers' Task.score of the same messages; without turns (a single reply) the tool rewards
    see no call."""
    from omegaconf import OmegaConf

    from trainctl.envs import verifiers as kind
    from trainctl.runtime.rewards import verifiers as scorer
    from trainctl.runtime.trajectories import REWARD_KEY

    env = OmegaConf.create(
        {"id": "vf_tools", "args": {}, "path": [str(FIXTURES)], "tasks": [], "train_size": 30, "test_size": 8,
         "seed": 0, "curriculum": {"enabled": False}}
    )  # fmt: skip
    assert kind.problems(env) == []
    rows = list(kind.rows(env, "train"))[:3]
    trajectories: dict[str, list[list[dict]]] = {}
    for r in rows:
        data, question = json.loads(r["extra_info"]["data"]), r["prompt"][-1]["content"]
        expression = question.split("What is ")[1].split("?")[0]
        answer = str(data["answer"])
        trajectories[r["extra_info"]["key"]] = [
            trajectory(question, expression, answer, f"{expression} = {answer}\n#### {answer}"),  # 1 + 0.5
            trajectory(question, expression, answer, "#### 7"),  # the calculator was right, the answer not: 0.5
            trajectory(question, "1 + 1", "2", f"#### {answer}"),  # right, no call answered it: 1
            trajectory(question, None, None, "#### 3"),  # nothing: 0
        ]
    own = task_score(with_verifiers, trajectories)
    seen = set()
    for r in rows:
        key = r["extra_info"]["key"]
        for turns, expected in zip(trajectories[key], own[key], strict=True):
            info = {**r["extra_info"], REWARD_KEY: json.dumps(turns)}
            got = scorer.compute_score(r["data_source"], "ignored: the turns are the trajectory", "", info)
            assert got == {
                "score": expected["reward"],
                **{f"rewards/{k}": v for k, v in expected["rewards"].items()},
                **{f"metrics/{k}": v for k, v in expected["metrics"].items()},
            }
            seen.add(got["score"])
        # a single reply (no turns): verl's flattened text, scored as one assistant message
        alone = scorer.compute_score(r["data_source"], f"#### {json.loads(r['extra_info']['data'])['answer']}", "",
                                     r["extra_info"])  # fmt: skip
        assert alone["rewards/calculated"] == 0.0 and alone["metrics/calls"] == 0.0 and alone["score"] == 1.0
    assert seen == {1.5, 0.5, 1.0, 0.0}
    scorer.close_all()


@pytest.mark.slow  # the GRPO run below calls the same server in every step
def test_tools_verifiers_serves_the_toolsets_to_trainctls_mcp_client(cli, isolated, with_verifiers):
    """`trainctl tools call` goes the way a run's agent-loop worker does: the stdio server in verifiers' interpreter,
    the toolset's own tool (named as verifiers names it: bare, for TOOL_PREFIX = None) answering."""
    called = cli("tools", "call", "verifiers.calculator", "--args", '{"expression": "61 + 95"}', *TOOLS_TASKSET)
    assert called.exit_code == 0, called.output
    assert called.stdout.strip().splitlines()[-1] == "156"
    wrong = cli("tools", "call", "verifiers.calculator", "--args", '{"expression": "2 ** 3"}', *TOOLS_TASKSET)
    assert "Error: not an arithmetic expression" in wrong.output


def test_a_later_plan_reads_the_tasksets_toolsets_from_its_rows(with_verifiers, tmp_path, monkeypatch):
    """The pairing check of a plan whose rows are written reads the toolsets the rows carry: no worker starts (here
    none could: the interpreter is gone)."""
    from omegaconf import OmegaConf

    from trainctl.data.writer import write_rows
    from trainctl.envs import verifiers as kind

    env = OmegaConf.create(
        {"kind": "verifiers", "name": "verifiers", "id": "vf_tools", "args": {}, "path": [str(FIXTURES)], "tasks": [],
         "train_size": 30, "test_size": 8, "seed": 0, "curriculum": {"enabled": False}}
    )  # fmt: skip
    assert kind.problems(env) == []
    write_rows(tmp_path / "rl" / "train.parquet", kind.rows(env, "train"))
    monkeypatch.setenv(kind.VENV_VAR, str(tmp_path / "gone"))
    monkeypatch.setenv("TRAINCTL_HOME", str(tmp_path / "home"))
    kind._PREPARED.clear()
    without = OmegaConf.create({"name": "none", "servers": {}})
    (problem,) = kind.tool_problems(env, without, tmp_path)
    assert problem.message.startswith("vf_tools's taskset has toolsets (CalculatorToolset)") and problem.key == "tools"
    assert (
        kind.tool_problems(env, OmegaConf.create({"name": "verifiers", "servers": {"verifiers": {}}}), tmp_path) == []
    )


# (overrides, the lines the error must hold); each is refused before the tools' server or anything else starts
BAD = {
    "a taskset with toolsets without tools=verifiers": (
        ["env=verifiers", "env.id=vf_tools", f"env.path=[{FIXTURES}]", "env.test_size=8"],
        ["vf_tools's taskset has toolsets (CalculatorToolset): the model calls their tools in verl's agent loop, "
         "which tools=verifiers gives it (now tools=none).", "Hint: tools=verifiers"],
    ),
    "toolsets one server cannot stand for": (
        ["env=verifiers", "env.id=vf_stateful_tools", f"env.path=[{FIXTURES}]", "env.test_size=2", "tools=verifiers"],
        ["toolset NotebookToolset (taskset scope) keeps per-rollout state (a vf.State), which verifiers syncs with "
         "each rollout over a state channel (VF_STATE_URL) that trainctl's agent loop does not run",
         "toolset TaskFilesToolset (task scope) sets itself up for each rollout's task (setup_task)",
         "Hint: tools=verifiers serves toolsets that answer every rollout alike"],
    ),
    "tools=verifiers without env=verifiers": (
        ["tools=verifiers"],
        ["tools.servers.verifiers serves the toolsets of env=verifiers' taskset (tools=verifiers), and env=none has "
         "none.", "Hint: env=verifiers env.id=MODULE, or tools=none"],
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_tool_pairings_are_one_message_before_anything_starts(case, cli, isolated, with_verifiers):
    words, lines = BAD[case]
    result = cli("config", "validate", "algorithm=grpo", *words)
    assert result.exit_code == 1, result.output
    said = " ".join(result.stderr.split())
    for line in lines:
        assert " ".join(line.split()) in said, said
    assert not (isolated / "data").exists(), "nothing written"


@pytest.mark.slow
def test_grpo_trains_tiny_tools_on_a_taskset_with_a_toolset(
    real_home, verifiers_venv, tiny_tools_dir, tmp_path_factory
):
    """The agent recipe on vf_tools for 2 steps: tiny-tools calls the taskset's calculator through tools=verifiers,
    and the score each trajectory trained on is verifiers' Task.score of its turns (the dump: each trajectory's turns,
    its task's key and its score); each reward and metric is logged per step; `trainctl eval` of the run scores the
    held-out split's trajectories as Task.score does."""
    from tests.real_runs import tools_home
    from trainctl.metrics import read_metrics

    tools_home(real_home, tiny_tools_dir, tmp_path_factory)
    started = time.monotonic()
    run = train(
        real_home, "agent-vf", "recipe=agent-arith-tiny-cpu", *TOOLS_TASKSET, "env.max_prompt_length=160",
        "env.max_response_length=128", "tools.max_tool_response_length=64", "run.max_steps=2", "run.val_every=null",
        "trainer.val_before_train=false", "logger=console", check_first=False,
        TRAINCTL_VERIFIERS_VENV=str(verifiers_venv),
    )  # fmt: skip
    print(f"2 agent GRPO steps on vf_tools: {time.monotonic() - started:.0f} s")
    dumped = [json.loads(ln) for s in (1, 2) for ln in (run.path / "rollouts" / f"{s}.jsonl").read_text().splitlines()]
    assert len(dumped) == 2 * 8 * 8  # 2 steps of 8 prompts x 8 samples
    trajectories: dict[str, list[list[dict]]] = {}
    for d in dumped:
        trajectories.setdefault(d["gts"], []).append(d["turns"])
    called = [d for d in dumped if any(t["role"] == "tool" for t in d["turns"])]
    assert len(called) >= len(dumped) // 4, "tiny-tools calls the taskset's calculator"
    own = task_score(verifiers_venv, trajectories)
    for key in trajectories:
        assert [d["score"] for d in dumped if d["gts"] == key] == [o["reward"] for o in own[key]], key
    assert {d["score"] for d in called} & {1.5, 0.5}, "calls whose results held the answer were credited"
    metrics = read_metrics(run.path)
    for step in (1, 2):
        for name in ("env/vf_tools/reward", "env/vf_tools/rewards/correct", "env/vf_tools/rewards/calculated",
                     "env/vf_tools/metrics/calls", "tool/calls"):  # fmt: skip
            assert name in metrics[step], sorted(metrics[step])
        step_rows = [d for d in dumped if d["step"] == step]
        assert metrics[step]["env/vf_tools/reward"] == pytest.approx(sum(d["score"] for d in step_rows) / 64)
        assert metrics[step]["tool/calls"] == sum(t["role"] == "tool" for d in step_rows for t in d["turns"])
    done = subprocess.run(
        trainctl("runs", "show", str(run.path), "--all"), env=real_home.env(), capture_output=True, text=True
    )
    assert done.returncode == 0 and "env/vf_tools/rewards/calculated" in done.stdout, done.stdout[-2000:]

    # `trainctl eval` of the run: the held-out split through the same tool loop, each trajectory scored whole
    evaluated = subprocess.run(
        trainctl("eval", str(run.path), "--limit", "4", "n=2", "temperature=1.0"), cwd=run.work,
        env=real_home.env(TRAINCTL_VERIFIERS_VENV=str(verifiers_venv)), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert evaluated.returncode == 0, (evaluated.stdout + evaluated.stderr)[-3000:]
    samples = [json.loads(ln) for ln in (run.path / "eval/samples/env/step-2.jsonl").read_text().splitlines()]
    assert len(samples) == 4 * 2
    held_out: dict[str, list[list[dict]]] = {}
    for sample in samples:
        held_out.setdefault(sample["ground_truth"], []).append(sample["turns"])
    assert not set(held_out) & set(trajectories), "the held-out split's tasks are not the train split's"
    own = task_score(verifiers_venv, held_out)
    for key in held_out:
        assert [s["reward"] for s in samples if s["ground_truth"] == key] == [o["reward"] for o in own[key]], key
    for sample in samples:  # the calls the scorer saw are the trajectory's
        calls = sum(t["role"] == "tool" for t in sample["turns"])
        assert sample["reward_extra"]["metrics/calls"] == calls == len(sample["tool_calls"])
