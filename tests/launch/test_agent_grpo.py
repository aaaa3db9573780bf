"""Agentic RL for real on CPU, through trainctl's own CLI: `trainctl train recipe=agent-arith-tiny-cpu` runs the PPO
family (verl.trainer.main_ppo) through verl's tool agent loop, trainctl's hf rollout and the built-in calculator MCP
server, which the run starts over stdio and stops with it. The session runs the recipe once, as shipped
(tests/real_runs.py agent_run: GRPO, AGENT_STEPS steps, validated before and after): the run test_learning checks
learns.

The model is `trainctl model init tiny-tools` (the tiny model after a warm start on calculator calls: a random one
never writes a tool call); the data is `trainctl data prep arith-tools`. The same run through raw verl overrides
(the test this one replaced) proved nothing more: trainctl writes the same multi_turn keys and tool config itself.
"""

from __future__ import annotations

import itertools
import json
import re

import pytest
import torch
import yaml

from tests.real_runs import AGENT_STEPS
from tests.runtime.mcp_fixtures import wait_gone
from trainctl.metrics import read_metrics
from trainctl.runtime.tool_calls import read_call_logs

# a hermes call, the tool's answer verl appended as the next turn, and what the model generated after it
# (rollouts are decoded without special tokens: <|im_end|>/<|im_start|> are gone, role names stay)
TURN = re.compile(
    r"<tool_call>\n(.*?)\n</tool_call>\nuser\n<tool_response>\n(.*?)\n</tool_response>\nassistant\n", re.S
)


def test_agent_recipe_calls_the_calculator_server_and_reads_its_answers(agent_run, tiny_tools_dir, cli, tmp_path):
    run = agent_run.path  # the session's agent run (tests/real_runs.py)

    # the tool config verl read: written by trainctl into the run folder, the server named inline
    config = yaml.safe_load((run / "tools.yaml").read_text())
    assert [t["tool_schema"]["function"]["name"] for t in config["tools"]] == ["calculator"]
    assert config["tools"][0]["config"]["server_spec"]["args"][-1] == str(run / "tools" / "calculator.jsonl")

    # what the calculator process itself answered, and the calls the bridge in the agent-loop worker made
    executed = [json.loads(line) for line in (run / "tools" / "calculator.jsonl").read_text().splitlines()]
    bridged = read_call_logs(run / "tools" / "calls")
    assert executed and bridged
    answers = {c["expression"]: c.get("result") for c in executed}
    answered = [c for c in bridged if not c["error"]]
    assert answered and all(answers.get(c["arguments"]["expression"]) == c["result"] for c in answered), (
        "every call the bridge got an answer for was answered by the server process"
    )
    assert all(c["server"] == "calculator" and c["trajectory"] for c in bridged)

    samples = [
        json.loads(line) for f in sorted((run / "rollouts").glob("*.jsonl")) for line in f.read_text().splitlines()
    ]
    # 8 prompts a step, 8 samples of each
    assert {s["step"] for s in samples} == set(range(1, AGENT_STEPS + 1)) and len(samples) == AGENT_STEPS * 8 * 8
    checked = 0
    for sample in samples:
        for turn in TURN.finditer(sample["output"]):
            call = _json(turn.group(1))
            if not isinstance(call, dict) or call.get("name") != "calculator":
                continue  # a malformed call: verl answers it itself, no server involved
            expression = (call.get("arguments") or {}).get("expression")
            if answers.get(expression) is not None:
                # parsed from the model's text, executed by the server, and its answer is the next turn's context
                assert turn.group(2) == answers[expression], (expression, sample["output"])
                checked += 1
    assert checked >= 8, f"only {checked} verified tool turns in {len(samples)} rollouts"

    metrics = read_metrics(run)
    steps = list(range(1, AGENT_STEPS + 1))
    assert sorted(metrics) == steps
    for step in steps:
        m = metrics[step]
        assert m["tool/calls"] > 0 and m["tool/calculator/calls"] == m["tool/calls"]
        assert 0 < m["tool/calls_per_trajectory"] <= 3 and 0 <= m["tool/error_share"] <= 1
        assert m["num_turns/mean"] > 2, "multi-turn trajectories"
        assert "critic/score/mean" in m and "actor/pg_loss" in m
    # every call counted once: in the step that made it, or with the validation after the last step (val-tool/*)
    validated = metrics[AGENT_STEPS]["val-tool/calls"]
    assert sum(metrics[s]["tool/calls"] for s in steps) + validated == len(bridged)

    # the stdio server stopped with the run: nothing holding its log path is alive
    assert not wait_gone(str(run / "tools" / "calculator.jsonl")), "a calculator process outlived the run"

    merged = cli("ckpt", "merge", str(run), "--out", str(tmp_path / "merged"))
    assert merged.exit_code == 0, merged.output
    from transformers import AutoModelForCausalLM

    after = AutoModelForCausalLM.from_pretrained(tmp_path / "merged").state_dict()
    before = AutoModelForCausalLM.from_pretrained(tiny_tools_dir).state_dict()
    assert any(not torch.equal(v, before[k]) for k, v in after.items()), "the policy was updated"


def _json(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return None


def test_the_agent_runs_trajectories_as_turns_and_its_tool_environment(agent_run, cli):
    """rollouts/N.jsonl keeps verl's flattened text and adds each trajectory's turns (issue 30): the calculator's
    answers in the tool turns are the server's own; `runs rollouts` shows them; lock.json names the server."""
    run = agent_run.path
    executed = [json.loads(line) for line in (run / "tools" / "calculator.jsonl").read_text().splitlines()]
    answers = {c["expression"]: c.get("result") for c in executed}
    rows = [json.loads(line) for line in (run / "rollouts" / "1.jsonl").read_text().splitlines()]
    assert all({"input", "output", "score", "step", "uid"} <= set(r) for r in rows), "verl's fields stay"
    with_turns = [r for r in rows if r.get("turns")]
    assert len(with_turns) == len(rows), "every trajectory of the step has its turns"
    verified = 0
    for row in with_turns:
        turns = row["turns"]
        assert turns[0]["role"] == "user" and turns[-1]["role"] == "assistant", turns
        for call_turn, answer in itertools.pairwise(turns):
            for call in call_turn.get("tool_calls") or []:
                expression = (call.get("arguments") or {}).get("expression") if isinstance(call, dict) else None
                if answer["role"] == "tool" and answers.get(expression) is not None:
                    assert answer["content"] == answers[expression], (call, answer)
                    verified += 1
    assert verified >= 4, f"only {verified} tool turns matched the server's log"

    shown = cli("runs", "rollouts", str(run), "--step", "1", "--best", "-n", "2")
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.startswith(f"step 1: {len(rows)} trajectories in all, best first; showing 2")
    best = max(r["score"] for r in rows)
    assert f"· reward {best:g} ·" in shown.stdout.splitlines()[2] and "  user: " in shown.stdout
    # the best two need not have called the tool (a sampled run): the whole step shows the calls and their answers
    every = cli("runs", "rollouts", str(run), "--step", "1", "-n", str(len(rows)))
    assert every.exit_code == 0, every.output
    assert "  assistant -> calculator(expression=" in every.stdout and "  tool <- " in every.stdout

    lock = json.loads((run / "lock.json").read_text())["tools"]["servers"]["calculator"]
    assert lock["server_info"]["name"] == "calculator" and lock["tools"] == ["calculator"]
    assert lock["package"]["name"] == "trainctl" and "--log <run>/tools/calculator.jsonl" in lock["command"]


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_tool_server_killed_mid_run_fails_its_calls_in_flight_starts_again_and_the_run_ends_well(cli, tiny_tools):
    """Issue 59: the agent recipe on trainctl's sampler, its calculator MCP server (stdio, one per agent-loop worker)
    SIGKILLed after the first step. The calls in flight fail as tool errors (the model reads the error), the next call
    starts the server again (tool/server_restarts), and the run trains its steps to the end: never a hang."""
    import time
    from pathlib import Path

    from tests.launch.test_faults import Attempt
    from tests.real_runs import trainctl

    assert cli("data", "prep", "arith-tools").exit_code == 0
    work, steps = Path.cwd(), 4
    args = ["recipe=agent-arith-tiny-cpu", "hardware.rollout_engine=hf", f"run.max_steps={steps}",
            "trainer.val_before_train=false", "run.val_every=null", "run.name=agent-kill"]  # fmt: skip
    attempt = Attempt(work, trainctl("train", *args), name="agent-kill")
    attempt.wait(lambda: len(attempt.steps(1)) >= 1, "the first step", timeout=600)
    servers = attempt.processes("calculator.jsonl", "the calculator server")
    for server in servers:
        server.kill()
    killed_at = time.monotonic()
    assert attempt.finish() == 0, attempt.output.decode(errors="replace")[-3000:]
    assert time.monotonic() - killed_at < 600
    metrics = read_metrics(work / "runs" / "agent-kill")
    assert sorted(metrics) == list(range(1, steps + 1))
    after = [metrics[s] for s in range(2, steps + 1)]
    assert sum(m.get("tool/server_restarts", 0) for m in after) >= 1, after
    assert all(m.get("tool/calls", 0) > 0 for m in after), "the calls went on after the restart"
