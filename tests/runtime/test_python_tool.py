"""Python function tools (tools.functions) in verl's real ToolAgentLoop with a scripted model: the tool config trainctl
writes for a plan, the function's answer as the next turn's context, errors and timeouts as error answers, the call
log, and the tool metrics computed from it."""

from __future__ import annotations

import textwrap

import pytest
import yaml

from tests.runtime.agent_loop_harness import loop_config, run_tool_loop, tool_call
from trainctl.backends import tools as verl_tools
from trainctl.data.tools import TOOL_INSTRUCTION
from trainctl.plan import make_plan
from trainctl.runtime import python_tool
from trainctl.runtime.tool_calls import read_call_logs
from trainctl.runtime.tool_metrics import CallReader, call_metrics

QUESTION = [{"role": "user", "content": f"What is 6 * 7? {TOOL_INSTRUCTION}"}]
FUNCTIONS = textwrap.dedent(
    '''
    import time


    def lookup(word: str) -> str:
        """Look a word up.

        Args:
            word: the word
        """
        if word == "boom":
            raise ValueError("no entry for boom")
        if word == "slow":
            time.sleep(3)
        return word.upper()
    '''
)


@pytest.fixture
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _tool_config(tmp_path, overrides: list[str]):
    """The tool config `trainctl train` would write into the run folder for these overrides."""
    plan = make_plan(["algorithm=grpo", "data=arith-tools", *overrides], native=False)
    from trainctl.checks.tools import probes

    assert probes(plan.subject) == []
    path = verl_tools.write_tool_config(tmp_path / "tools.yaml", plan.subject.extra["tools"]["document"])
    return path, verl_tools.run_path(plan.run_dir, verl_tools.CALLS_DIR)


def test_the_shipped_function_tool_answers_in_verls_tool_loop(tiny_model_dir, tokenizer, tmp_path):
    path, calls = _tool_config(tmp_path, ["tools=calculator-fn"])
    entry = yaml.safe_load(path.read_text())["tools"][0]
    assert entry["class_name"] == "trainctl.runtime.python_tool.PythonFunctionTool"
    cfg = loop_config(tiny_model_dir, tool_config_path=path)
    replies = [tool_call("calculator", expression="6 * 7"), "6 * 7 = 42\n#### 42"]
    out, model = run_tool_loop(cfg, tokenizer, replies, QUESTION)

    assert "<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n" in model.prompt_text(1)
    assert out.num_turns == 4
    (record,) = read_call_logs(calls)
    assert record["function"] == "trainctl.runtime.tools.functions:calculator" and record["result"] == "42"
    assert record["trajectory"] and record["error"] is False


def test_a_function_that_raises_or_times_out_answers_with_an_error_and_the_trajectory_goes_on(
    tiny_model_dir, tokenizer, tmp_path
):
    functions = tmp_path / "my_tools.py"
    functions.write_text(FUNCTIONS)
    path, calls = _tool_config(
        tmp_path,
        [
            "tools=none",
            f"tools.functions=[{functions}:lookup]",
            "tools.call_timeout_s=1",
            "tools.max_tool_response_length=64",
        ],
    )
    cfg = loop_config(tiny_model_dir, tool_config_path=path, max_assistant_turns=5)
    replies = [
        tool_call("lookup", word="boom"),
        tool_call("lookup", word="slow"),
        tool_call("lookup", word="ok"),
        "done",
    ]
    out, model = run_tool_loop(cfg, tokenizer, replies, QUESTION)

    assert "<tool_response>\nError: ValueError: no entry for boom\n</tool_response>" in model.prompt_text(1)
    assert "<tool_response>\nError: the call to 'lookup' timed out after 1 s\n</tool_response>" in model.prompt_text(2)
    assert "<tool_response>\nOK\n</tool_response>" in model.prompt_text(3)
    assert out.num_turns == 8  # user + 4 assistant turns + 3 tool turns

    records = read_call_logs(calls)
    assert [r["error"] for r in records] == [True, True, False]
    assert 1 <= records[1]["seconds"] < 2, "the loop waited 1 s for the slow call, not its 3 s"
    figures = call_metrics(records, trajectories=2)
    assert figures["tool/calls"] == 3 and figures["tool/errors"] == 2
    assert figures["tool/error_share"] == pytest.approx(2 / 3) and figures["tool/calls_per_trajectory"] == 1.5
    assert figures["tool/trajectories_with_calls"] == 0.5 and figures["tool/lookup/calls"] == 3


def test_the_call_reader_returns_each_whole_line_once(tmp_path):
    reader = CallReader(tmp_path)
    assert reader.new_records() == []
    log = tmp_path / "calls-1.jsonl"
    log.write_text('{"tool": "a", "error": false}\n{"tool": "b", "err')
    assert [r["tool"] for r in reader.new_records()] == ["a"]
    with open(log, "a") as f:
        f.write('or": true}\n')
    (tmp_path / "calls-2.jsonl").write_text('{"tool": "c", "error": false}\n')
    assert [r["tool"] for r in reader.new_records()] == ["b", "c"]
    assert reader.new_records() == []
    assert call_metrics([], trajectories=8)["tool/calls_per_trajectory"] == 0.0
    # a resumed run's reader starts after the calls of earlier attempts
    assert CallReader(tmp_path, skip_existing=True).new_records() == []


def test_function_specs(tmp_path):
    assert python_tool.split_spec("tools/x.py:search") == ("tools/x.py", "search")
    assert python_tool.split_spec("pkg.mod:fn") == ("pkg.mod", "fn")
    fn = python_tool.load_function("trainctl.runtime.tools.functions:calculator")
    assert fn("2 ** 10") == "1024"
