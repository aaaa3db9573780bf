"""Checking a chat template against verl's tool loop (trainctl.models.tool_template), the tiny model's included."""

from __future__ import annotations

import pytest

from trainctl.data.tools import calculator_schema
from trainctl.models.tool_template import tool_template_problems

CHATML_WITHOUT_TOOLS = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


@pytest.fixture
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def test_the_tiny_models_template_carries_tools(tokenizer):
    assert tool_template_problems(tokenizer, [calculator_schema()], "qwen2") == []


def test_templates_verl_cannot_use_are_named(tokenizer):
    tiny = tokenizer.chat_template
    tokenizer.chat_template = CHATML_WITHOUT_TOOLS
    assert tool_template_problems(tokenizer, [calculator_schema()], "qwen2") == [
        "the chat template ignores tools: the schema of 'calculator' is not in the rendered prompt"
    ]
    # a call turn that renders differently once something follows it: verl's turn-by-turn tokens cannot match
    calls_end = "{%- endfor %}{{- '<|im_end|>\\n' }}"
    marked = "{%- endfor %}{%- if not loop.last %}{{- ' (answered)' }}{%- endif %}{{- '<|im_end|>\\n' }}"
    assert calls_end in tiny
    tokenizer.chat_template = tiny.replace(calls_end, marked, 1)
    [problem] = tool_template_problems(tokenizer, [calculator_schema()], "qwen2")
    assert problem.startswith("verl cannot append a tool result with this chat template: ValueError: Continuous Token")
    tokenizer.chat_template = tiny.replace("message['content'] + '\\n</tool_response>'", "'\\n</tool_response>'")
    assert tool_template_problems(tokenizer, [calculator_schema()], "qwen2") == [
        "the chat template drops tool results: a tool message renders without its content"
    ]
    tokenizer.chat_template = None
    assert tool_template_problems(tokenizer, [calculator_schema()]) == ["the tokenizer has no chat template"]
