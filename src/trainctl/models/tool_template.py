"""Can a model's chat template carry tools the way verl's tool agent loop uses it?

verl 0.9.1 renders the tool schemas into the first prompt with the tokenizer's chat template, then appends each tool
result by rendering it after a synthetic conversation and keeping the token-level suffix (Continuous Token,
verl/utils/tokenizer/continuous_token.py). A template that ignores `tools` trains a model that never sees them; one
whose tool turns do not render as a suffix fails inside the rollout. This finds both before a run starts, with verl's
own builder.
"""

from __future__ import annotations

from typing import Any

PROBE_RESULT = "4242"


def tool_template_problems(tokenizer: Any, tools: list[dict], hf_model_type: str | None = None) -> list[str]:
    """What is wrong with rendering `tools` (OpenAI function schemas) through this tokenizer's chat template, as
    sentences; empty when verl's tool loop can use it."""
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    if not getattr(tokenizer, "chat_template", None):
        return ["the tokenizer has no chat template"]
    name = tools[0]["function"]["name"]
    question = [{"role": "user", "content": "What is 2 + 2?"}]
    try:
        prompt = tokenizer.apply_chat_template(question, tools=tools, tokenize=False, add_generation_prompt=True)
    except Exception as e:
        return [f"the chat template fails to render tools: {type(e).__name__}: {e}"]
    if name not in prompt:
        return [f"the chat template ignores tools: the schema of {name!r} is not in the rendered prompt"]
    call = {"type": "function", "function": {"name": name, "arguments": {}}}
    conversation = [*question, {"role": "assistant", "content": "", "tool_calls": [call]}]
    try:
        builder = create_continuous_token_builder(tokenizer, hf_model_type=hf_model_type)
        merged = builder.merge_context_tokens(
            conversation, [*conversation, {"role": "tool", "content": PROBE_RESULT}], [], tools=tools
        )
    except Exception as e:
        return [f"verl cannot append a tool result with this chat template: {type(e).__name__}: {e}"]
    if PROBE_RESULT not in tokenizer.decode(merged.token_ids):
        return ["the chat template drops tool results: a tool message renders without its content"]
    return []


def schema_tokens(tokenizer: Any, tools: list[dict]) -> int:
    """Prompt tokens the tool schemas add to every prompt with this tokenizer's chat template (the first prompt of a
    trajectory, rendered as verl's tool agent loop renders it, with and without them)."""
    question = [{"role": "user", "content": ""}]

    def tokens(**kwargs) -> int:
        ids = tokenizer.apply_chat_template(question, tokenize=True, add_generation_prompt=True, **kwargs)
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        return len(ids)

    return tokens(tools=tools) - tokens()
