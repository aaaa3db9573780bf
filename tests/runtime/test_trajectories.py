"""Trajectories as turns (trainctl.runtime.trajectories): verl's real ToolAgentLoop with the calculator server and a
scripted model records each trajectory's turns; verl's own dump writer, wrapped, adds them to rollouts/N.jsonl
beside its flattened text. tests/launch/test_agent_grpo.py reads them from a real agent run."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.runtime.agent_loop_harness import ScriptedModel, loop_config, tool_call
from tests.runtime.mcp_fixtures import calculator_entry
from tests.runtime.test_tool_agent_loop import QUESTION, _close_connections, _tools_yaml, tokenizer  # noqa: F401
from trainctl.runtime import trajectories, verl_patches

# sha256 of the source of what the hooks wrap, in verl 0.9.1


@pytest.fixture
def hooked():
    """The hooks installed on verl's classes for the test, and removed after it."""
    import importlib

    loop = importlib.import_module(verl_patches.LOOP)
    trainer = importlib.import_module(verl_patches.TRAINER)
    saved = (
        loop.ToolAgentLoop.run,
        loop.ToolAgentLoop._handle_pending_state,
        trainer.PPOTrainer.__dict__["_write_generations"],
    )
    for module, func in verl_patches.TRAJECTORY_PATCHES:
        verl_patches._APPLIED.pop((module, func), None)
    verl_patches._patch_module(loop, tuple(verl_patches.TRAJECTORY_PATCHES))
    verl_patches._patch_module(trainer, tuple(verl_patches.TRAJECTORY_PATCHES))
    yield loop, trainer
    loop.ToolAgentLoop.run, loop.ToolAgentLoop._handle_pending_state = saved[:2]
    trainer.PPOTrainer._write_generations = saved[2]
    for module, func in verl_patches.TRAJECTORY_PATCHES:
        verl_patches._APPLIED.pop((module, func), None)


async def _trajectory(cfg, model, uid: str):
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
    from verl.tools.tool_registry import load_all_tools
    from verl.utils.dataset.rl_dataset import RLHFDataset

    loop = ToolAgentLoop(
        trainer_config=DictConfigWrap(cfg),
        server_manager=model,
        tokenizer=model.tokenizer,
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(cfg.data),
        hf_model_type="qwen2",
        tools=ToolListWrap(load_all_tools(cfg.actor_rollout_ref.rollout.multi_turn.tool_config_path, None)),
    )
    # what verl's agent-loop worker passes: the row's fields, its uid, the session (rollout.n) and the step
    return await loop.run(
        {"temperature": 1.0, "logprobs": True},
        raw_prompt=QUESTION,
        tools_kwargs={},
        extra_info={},
        uid=uid,
        session_id=1,
        global_steps=3,
    )


def test_turns_are_recorded_and_joined_to_verls_dump(hooked, tiny_model_dir, tokenizer, tmp_path):  # noqa: F811
    from omegaconf import OmegaConf

    _, trainer = hooked
    rollouts = tmp_path / "rollouts"
    cfg = loop_config(
        tiny_model_dir, tool_config_path=_tools_yaml(tmp_path, {"calc": calculator_entry()}), max_assistant_turns=2
    )
    OmegaConf.update(cfg, "trainer.rollout_data_dir", str(rollouts))
    answered = ScriptedModel(tokenizer, [tool_call("calculator", expression="6 * 7"), "6 * 7 = 42\n#### 42"])
    cut_short = ScriptedModel(tokenizer, [tool_call("calculator", expression="1 / 0"), "never appended"])

    async def both():
        await _trajectory(cfg, answered, "u1")
        cfg.actor_rollout_ref.rollout.multi_turn.max_assistant_turns = 1
        await _trajectory(cfg, cut_short, "u2")

    asyncio.run(both())
    records = trajectories.read_records(rollouts / "turns", 3)
    assert sorted(records) == ["u1_1_0", "u2_1_0"]
    assert records["u1_1_0"]["turns"] == [
        {"role": "user", "content": QUESTION[0]["content"]},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"name": "calculator", "arguments": {"expression": "6 * 7"}}],
        },
        {"role": "tool", "content": "42"},
        {"role": "assistant", "content": "6 * 7 = 42\n#### 42"},
    ]
    # the loop stopped at its budget before appending the turn it generated: added from its tokens
    assert records["u2_1_0"]["turns"][-1]["content"].startswith("<tool_call>")

    # verl's writer, as the trainer calls it; then the hook adds the turns beside verl's fields
    trainer.PPOTrainer._write_generations(
        ["in1", "in2", "in3"], ["out1", "out2", "out3"], [None, None, None], [1.0, 0.0, 0.5],
        {"uid": ["u1_1_0", "u2_1_0", "u3_0_0"]}, str(rollouts), 3,
    )  # fmt: skip
    rows = [json.loads(line) for line in (rollouts / "3.jsonl").read_text().splitlines()]
    assert [(r["input"], r["output"], r["score"], r["step"], r["uid"]) for r in rows] == [
        ("in1", "out1", 1.0, 3, "u1_1_0"), ("in2", "out2", 0.0, 3, "u2_1_0"), ("in3", "out3", 0.5, 3, "u3_0_0"),
    ], "verl's fields, as verl wrote them"  # fmt: skip
    assert rows[0]["turns"] == records["u1_1_0"]["turns"] and rows[0]["request_id"]
    assert "turns" not in rows[2], "a sample without a record keeps verl's fields only"
