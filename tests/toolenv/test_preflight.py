"""The tokenization preflight (trainctl.toolenv.preflight): a scripted trajectory through the real calculator server
and the model's chat template, tokenized as verl's tool agent loop tokenizes it, before anything starts."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.checks.test_tools import GRPO
from trainctl.mcp.discovery import forget_discovered


@pytest.fixture(autouse=True)
def fresh_listings():
    forget_discovered()
    yield
    forget_discovered()


@pytest.fixture
def tool_data(isolated, cli):
    prep = cli("data", "prep", "arith-tools")
    assert prep.exit_code == 0, prep.output
    return isolated / "data" / "arith-tools"


def _miscounting(tiny_model, tmp_path):
    """The tiny model with a template that numbers each tool answer by its place in the conversation: rendered
    after verl's synthetic turns the number differs from the whole conversation's."""
    model = tmp_path / "miscounting"
    shutil.copytree(tiny_model, model)
    template = model / "chat_template.jinja"
    text = template.read_text()
    plain = "{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}"
    assert plain in text
    numbered = plain.replace("'\\n<tool_response>\\n'", "'\\n<tool_response n=' ~ loop.index0 ~ '>\\n'")
    template.write_text(text.replace(plain, numbered))
    return model


def test_a_template_that_tokenizes_turns_differently_is_caught_before_anything_starts(
    cli, tool_data, tiny_model, tmp_path
):
    import sys

    model = _miscounting(tiny_model, tmp_path)
    result = cli("train", *GRPO, "tools=calculator", f"model.path={model}", "run.name=miscounted")
    assert result.exit_code == 1, result.output
    text = " ".join(result.stderr.split())
    assert (
        "preflight of MCP server 'calculator': the trajectory tokenizes differently turn by turn than as a whole "
        "conversation, from token" in text
    )
    assert "in turn 2 (the answer of calculator.calculator)" in text
    assert "turn by turn (what verl's loop trains on): token" in text and "<tool_response n=3>" in text
    assert "the whole conversation: token" in text and "<tool_response n=2>" in text
    assert "the scripted call: calculator({'expression': '12 * (3 + 4)'})" in text, "the read-only tool, called"
    run = tmp_path / "work" / "runs" / "miscounted"
    assert not (run / "run.json").exists() and not (run / "tools").exists(), "nothing started, nothing left"
    if "ray" in sys.modules:
        import ray

        assert not ray.is_initialized()


def test_the_shipped_template_passes_through_the_real_server(tool_data, tiny_model):
    from trainctl.checks.tools import probes
    from trainctl.plan import make_plan
    from trainctl.toolenv import preflight

    plan = make_plan([*GRPO, "tools=calculator"], native=False)
    assert probes(plan.subject) == []
    outcomes, problems = preflight.run(plan.cfg, plan.subject.extra["tools"]["document"])
    assert problems == []
    (outcome,) = outcomes
    assert outcome.script.called and outcome.script.result == "84", "the calculator's own answer"
    assert 0 < outcome.trained < outcome.tokens, "the assistant's tokens are trained on, the rest are not"
    (logged,) = [json.loads(line) for line in (plan.run_dir / "tools" / "calculator.jsonl").read_text().splitlines()]
    assert (logged["expression"], logged["result"]) == ("12 * (3 + 4)", "84"), "the server process answered it"


def test_which_tool_is_called_and_stop_tokens_the_tokenizer_lacks(tiny_model):
    from mcp.types import Tool, ToolAnnotations
    from transformers import AutoTokenizer

    from trainctl.toolenv.preflight import choose_call, stop_token_problems

    schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    delete = Tool(name="delete", input_schema=schema)
    read = Tool(name="read", input_schema=schema, annotations=ToolAnnotations(read_only_hint=True))
    ping = Tool(name="ping", input_schema={"type": "object", "properties": {}})
    assert choose_call([delete, read], None)[:2] == ("read", {"path": "1"}), "a read-only tool, placeholder arguments"
    assert choose_call([delete, ping], None)[:2] == ("delete", {}), "refused arguments, nothing runs"
    assert choose_call([ping], None) is None, "a tool that runs without arguments is not called"
    assert choose_call([delete, read], ["delete"])[:2] == ("delete", {}), "only the tools the run allows"

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    assert stop_token_problems(tokenizer, "hermes") == []
    (problem,) = stop_token_problems(tokenizer, "gemma4")
    assert "verl's 'gemma4' tool-call parser stops generation at token ids" in problem.message
    assert "the model would never stop after a tool call" in problem.message
