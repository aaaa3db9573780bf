"""verl's ToolAgentLoop with trainctl's tools: MCP servers through the bridge and @function_tool files, the tiny
model's chat template, and a scripted model (tests/runtime/agent_loop_harness.py)."""

from __future__ import annotations

import asyncio
import json
import textwrap
import uuid

import pytest

from tests.runtime.agent_loop_harness import loop_config, run_tool_loop, tool_call
from tests.runtime.mcp_fixtures import calculator_entry, probe_server_entry
from trainctl.backends.tools import tool_config, write_tool_config
from trainctl.data.tools import TOOL_INSTRUCTION, calculator_schema
from trainctl.mcp.discovery import discover
from trainctl.mcp.specs import parse_servers
from trainctl.runtime import mcp_bridge as mb
from trainctl.runtime.tool_calls import read_call_logs


@pytest.fixture
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(autouse=True)
def _close_connections():
    yield
    b = mb.bridge()
    asyncio.run(b.acall(b.close_all()))


def _tools_yaml(tmp_path, servers: dict, **options):
    found = discover(parse_servers({"mcpServers": servers}))
    return write_tool_config(tmp_path / "tools.yaml", tool_config(found, **options))


QUESTION = [{"role": "user", "content": f"What is 6 * 7? {TOOL_INSTRUCTION}"}]


def test_the_servers_answer_is_the_next_turns_context(tiny_model_dir, tokenizer, tmp_path):
    log = tmp_path / "calc.log"
    cfg = loop_config(tiny_model_dir, tool_config_path=_tools_yaml(tmp_path, {"calc": calculator_entry(log=log)}))
    replies = [tool_call("calculator", expression="6 * 7"), "6 * 7 = 42\n#### 42"]
    out, model = run_tool_loop(cfg, tokenizer, replies, QUESTION)

    assert "<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n" in model.prompt_text(1)
    assert [json.loads(line)["expression"] for line in log.read_text().splitlines()] == ["6 * 7"]
    assert out.num_turns == 4  # user, assistant (call), tool, assistant (answer)

    # verl's turn-by-turn tokens are exactly the chat template's rendering of the whole conversation
    conversation = [
        *QUESTION,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "calculator", "arguments": {"expression": "6 * 7"}}}],
        },
        {"role": "tool", "content": "42"},
        {"role": "assistant", "content": "6 * 7 = 42\n#### 42"},
    ]
    whole = tokenizer.apply_chat_template(conversation, tools=[calculator_schema()], tokenize=False)
    assert tokenizer.decode(out.prompt_ids + out.response_ids) + "\n" == whole

    # the model is trained on its own tokens only: the tool's answer (and the turn scaffolding) is masked out
    response = tokenizer.decode(out.response_ids)
    masked = tokenizer.decode([t for t, m in zip(out.response_ids, out.response_mask, strict=True) if m == 0])
    assert masked == "\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    assert response.startswith(replies[0]) and response.endswith("#### 42<|im_end|>")


def test_a_tool_that_raises_or_times_out_answers_with_an_error_and_the_trajectory_goes_on(
    tiny_model_dir, tokenizer, tmp_path
):
    tag = uuid.uuid4().hex
    tools = _tools_yaml(tmp_path, {"t": probe_server_entry("--tag", tag)}, timeout=3.0, call_log_dir=tmp_path / "c")
    cfg = loop_config(tiny_model_dir, tool_config_path=tools, max_assistant_turns=5)
    replies = [
        tool_call("sleep", seconds=60),
        tool_call("fail", message="disk on fire"),
        tool_call("crash"),
        tool_call("no_such_tool"),
        "#### 42",
    ]
    out, model = run_tool_loop(cfg, tokenizer, replies, QUESTION)

    answers = [
        model.prompt_text(i).rsplit("<tool_response>\n", 1)[1].split("\n</tool_response>")[0] for i in (1, 2, 3, 4)
    ]
    assert answers[0] == "Error: the call to 'sleep' timed out after 3 s"
    assert answers[1] == "Error: Error executing tool fail"
    assert answers[2].startswith("Error: MCP server 't' went away during the call")
    assert answers[3].startswith("Unknown function 'no_such_tool'")  # verl's own answer: no server is asked
    assert out.num_turns == 10 and tokenizer.decode(out.response_ids).endswith("#### 42<|im_end|>")
    assert [r["tool"] for r in read_call_logs(tmp_path / "c")] == ["sleep", "fail", "crash"]


FUNCTIONS = textwrap.dedent(
    '''
    from verl.tools.function_tool import function_tool


    @function_tool
    def {name}(a: int, b: int) -> str:
        """Multiply two integers.

        Args:
            a: the first factor
            b: the second factor
        """
        return str(a * b)
    '''
)


def test_python_function_tools_next_to_mcp_tools(tiny_model_dir, tokenizer, tmp_path):
    """verl's multi_turn.function_tool_path (@function_tool) in the same run as MCP tools."""
    name = f"multiply_{uuid.uuid4().hex[:8]}"  # verl's function registry is global to the process
    functions = tmp_path / "my_tools.py"
    functions.write_text(FUNCTIONS.format(name=name))
    tools = _tools_yaml(tmp_path, {"calc": calculator_entry()})
    cfg = loop_config(tiny_model_dir, tool_config_path=tools, function_tool_path=functions)
    replies = [tool_call(name, a=6, b=7), tool_call("calculator", expression="42 + 1"), "#### 43"]
    _, model = run_tool_loop(cfg, tokenizer, replies, QUESTION)

    assert f'"name": "{name}"' in model.prompt_text(0) and '"name": "calculator"' in model.prompt_text(0)
    assert "<tool_response>\n42\n</tool_response>" in model.prompt_text(1)
    assert "<tool_response>\n43\n</tool_response>" in model.prompt_text(2)


def test_a_rows_tool_selection_hides_the_other_tools(tiny_model_dir, tokenizer, tmp_path):
    tools = _tools_yaml(tmp_path, {"calc": calculator_entry(), "t": probe_server_entry()})
    cfg = loop_config(tiny_model_dir, tool_config_path=tools)
    replies = [tool_call("pid"), "done"]
    extra = {
        "tool_selection": ["calculator"],
        "tools_kwargs": {"calculator": {"create_kwargs": {"ground_truth": "42"}}},
    }
    _, model = run_tool_loop(cfg, tokenizer, replies, QUESTION, extra_info=extra)
    assert '"name": "calculator"' in model.prompt_text(0) and '"name": "pid"' not in model.prompt_text(0)
    assert "Unknown function 'pid'. Available tools: ['calculator']" in model.prompt_text(1)
