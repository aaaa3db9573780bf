"""Agentic RL for real on CPU: verl.trainer.main_ppo GRPO through verl's tool agent loop, trainctl's hf rollout and
the built-in calculator MCP server over stdio, started by the run's agent-loop worker and stopped with it.

The tiny model first gets a short SFT warm start on calculator demonstrations (tests/launch/tool_warm_start.py): a
random one never writes a tool call. The multi-turn keys are passed as command-line overrides until the `tools`
config group sets them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from tests.launch.tool_warm_start import warm_start
from tests.runtime.mcp_fixtures import calculator_entry, wait_gone
from trainctl.metrics import read_metrics
from trainctl.runtime import mcp_bridge as mb

REWARD = Path(__file__).with_name("partial_reward.py")
# a hermes call, the tool's answer verl appended as the next user turn, and what the model generated after it
# (rollouts are decoded without special tokens: <|im_end|>/<|im_start|> are gone, role names stay)
TURN = re.compile(
    r"<tool_call>\n(.*?)\n</tool_call>\nuser\n<tool_response>\n(.*?)\n</tool_response>\nassistant\n", re.S
)


@pytest.fixture(scope="session")
def tool_data_dir(session_dir) -> Path:
    from trainctl.data.tools import write_arith_tool_data

    folder = session_dir / "data" / "arith-tools"
    write_arith_tool_data(folder, train_rows=512, test_rows=32)
    return folder


@pytest.fixture(scope="session")
def tool_model_dir(session_dir, tiny_model_dir, tool_data_dir) -> Path:
    """The tiny model after the warm start (once per session)."""
    import pyarrow.parquet as pq

    torch.set_num_threads(1)
    rows = pq.read_table(tool_data_dir / "tool_sft" / "train.parquet").to_pylist()
    return warm_start(tiny_model_dir, rows, session_dir / "models" / "tiny-tools")


def agent_overrides(model: Path, data: Path, tools_yaml: Path, rollouts: Path) -> list[str]:
    multi_turn = "verl.actor_rollout_ref.rollout.multi_turn"
    return [
        "recipe=grpo-arith-tiny-cpu",
        "run.max_steps=2",
        f"model.path={model}",
        f"data.train_files={data / 'tool_rl' / 'train.parquet'}",
        f"data.val_files={data / 'tool_rl' / 'test.parquet'}",
        # the calculator's schema is in every prompt (~115 tokens); a call, its answer and the final answer ~70
        "data.max_prompt_length=160",
        "data.max_response_length=128",
        "reward=fn",
        f"reward.fn={REWARD}:compute_score",
        f"{multi_turn}.enable=true",
        f"{multi_turn}.format=hermes",
        f"{multi_turn}.tool_config_path={tools_yaml}",
        f"{multi_turn}.max_assistant_turns=3",
        f"verl.trainer.rollout_data_dir={rollouts}",
    ]


def test_grpo_calls_an_mcp_server_over_stdio_and_reads_its_answers(cli, tool_model_dir, tool_data_dir, tmp_path):
    server_log = tmp_path / "calculator-calls.jsonl"
    servers = mb.parse_servers({"mcpServers": {"calc": calculator_entry(log=server_log)}})
    tools_yaml = mb.write_tool_config(
        tmp_path / "tools.yaml", mb.tool_config(mb.discover(servers), timeout=10, call_log_dir=tmp_path / "calls")
    )
    rollouts = tmp_path / "rollouts"

    result = cli("train", *agent_overrides(tool_model_dir, tool_data_dir, tools_yaml, rollouts), "run.name=agent")
    assert result.exit_code == 0, result.output[-4000:]
    run = tmp_path / "work" / "runs" / "agent"

    # the calls the calculator process itself recorded, and those the bridge in the agent-loop worker made
    executed = [json.loads(line) for line in server_log.read_text().splitlines()]
    bridged = mb.read_call_logs(tmp_path / "calls")
    assert executed and len(executed) == len(bridged), "every call through the bridge reached the server"
    answers = {c["expression"]: c.get("result") for c in executed}
    server_pids = {c["pid"] for c in executed}
    assert all(c["server"] == "calc" and c["trajectory"] for c in bridged)

    samples = [json.loads(line) for f in sorted(rollouts.glob("*.jsonl")) for line in f.read_text().splitlines()]
    assert {s["step"] for s in samples} == {1, 2} and len(samples) == 2 * 8 * 4
    turns = [(s, m) for s in samples for m in TURN.finditer(s["output"])]
    checked = 0
    for sample, turn in turns:
        call = json.loads(turn.group(1)) if _is_json(turn.group(1)) else None
        response = turn.group(2)
        if (
            not isinstance(call, dict)
            or call.get("name") != "calculator"
            or not isinstance(call.get("arguments"), dict)
        ):
            continue  # a malformed call: verl answers it itself, no server involved
        expression = call["arguments"].get("expression")
        if expression in answers and answers[expression] is not None:
            # parsed from the model's text, executed by the server, and its answer is the next turn's context,
            # followed by what the model generated after reading it
            assert response == answers[expression], (expression, response, sample["output"])
            assert sample["output"][turn.end() :].strip() or turn.end() == len(sample["output"])
            checked += 1
    assert checked >= 8, f"only {checked} verified tool turns in {len(samples)} rollouts"

    metrics = read_metrics(run)
    assert sorted(metrics) == [1, 2]
    assert max(metrics[s]["num_turns/mean"] for s in (1, 2)) > 2, "multi-turn trajectories"
    assert all("critic/score/mean" in metrics[s] and "actor/pg_loss" in metrics[s] for s in (1, 2))

    # the stdio server stopped with the run: nothing holding its log path is alive
    assert not wait_gone(str(server_log)), f"calculator processes {server_pids} outlived the run"

    merged = cli("ckpt", "merge", str(run), "--out", str(tmp_path / "merged"))
    assert merged.exit_code == 0, merged.output
    from transformers import AutoModelForCausalLM

    after = AutoModelForCausalLM.from_pretrained(tmp_path / "merged").state_dict()
    before = AutoModelForCausalLM.from_pretrained(tool_model_dir).state_dict()
    assert any(not torch.equal(v, before[k]) for k, v in after.items()), "the policy was updated"


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except ValueError:
        return False
