"""Messages to prompt token ids, as training's rollout builds them, and tool calls parsed back as the run's tool loop
parses them.

Prompts go through verl's continuous-token builder (the tokenizer's chat template with the data's
`apply_chat_template_kwargs`), the builder `trainctl eval` uses, so that a served or chatted prompt is token for
token the prompt eval scored; for a conversation that grows (chat), new turns are appended as verl's tool agent loop
appends them. Tool calls are read with verl's ToolParser of the run's `tools.format` (hermes by default), the
parser the tool loop used while the model trained.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class ToolCall:
    name: str
    arguments: str  # JSON text, as the model wrote it (re-serialized by the parser)
    id: str

    def to_openai(self) -> dict:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}

    def parsed_arguments(self) -> Any:
        try:
            return json.loads(self.arguments)
        except ValueError:
            return self.arguments


class Prompter:
    """Prompt ids for messages, for one tokenizer (and model type) and the config's chat template kwargs."""

    def __init__(self, tokenizer, folder: Path, chat_template_kwargs: dict | None = None, tool_format: str = "hermes"):
        self.tokenizer = tokenizer
        self.model_type = json.loads((Path(folder) / "config.json").read_text()).get("model_type")
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.tool_format = tool_format
        self._parser = None

    def builder(self, extra_kwargs: dict | None = None):
        from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

        kwargs = {**self.chat_template_kwargs, **(extra_kwargs or {})}
        return create_continuous_token_builder(
            self.tokenizer, hf_model_type=self.model_type, chat_template_kwargs=kwargs or None
        )

    def prompt_ids(self, messages: list[dict], tools: list[dict] | None = None, extra_kwargs: dict | None = None):
        """The token ids of the conversation with the generation prompt (the assistant's turn) after it."""
        return list(self.builder(extra_kwargs).build_initial_tokens(messages, tools=tools or None))

    @property
    def parser(self):
        """verl's tool-call parser of the run's tools.format (imported on first use: it imports verl's agent loop)."""
        if self._parser is None:
            from verl.experimental.agent_loop.tool_parser import ToolParser

            self._parser = ToolParser.get_tool_parser(self.tool_format, self.tokenizer)
        return self._parser

    @property
    def stop_token_ids(self) -> list[int]:
        """Tokens the parser needs generation to stop at (none for hermes: the model's EOS ends a call)."""
        return list(self.parser.stop_token_ids)

    async def tool_calls(self, response_ids: list[int]) -> tuple[str | None, list[ToolCall]]:
        """(the text around the calls, the calls) of a response, as the run's tool loop reads them. The text is
        None when the response held only calls."""
        content, calls = await self.parser.extract_tool_calls(list(response_ids))
        if not calls:
            return None, []
        found = [ToolCall(c.name, c.arguments, c.tool_call_id or f"call_{uuid.uuid4().hex[:24]}") for c in calls]
        text = _strip_special(self.tokenizer, content).strip()
        return (text or None), found


def _strip_special(tokenizer, text: str) -> str:
    for token in tokenizer.all_special_tokens:
        text = text.replace(token, "")
    return text


def normalize_messages(messages: Any) -> list[dict]:
    """OpenAI chat messages as a chat template reads them: text parts joined, `developer` as `system`, and each tool
    call's JSON `arguments` string as the mapping the templates print (Qwen's writes `arguments | tojson`).
    Raises ValueError with what is wrong."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("'messages' must be a non-empty list")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise ValueError(f"messages[{i}] must be an object")
        role = m.get("role")
        if role == "developer":
            role = "system"
        if role not in ("system", "user", "assistant", "tool"):
            raise ValueError(f"messages[{i}].role {role!r} is not one of system, developer, user, assistant, tool")
        message: dict[str, Any] = {"role": role, "content": _text(m.get("content"), f"messages[{i}].content")}
        if role == "assistant" and m.get("tool_calls"):
            calls = []
            for j, call in enumerate(m["tool_calls"]):
                function = (call or {}).get("function") or {}
                if not function.get("name"):
                    raise ValueError(f"messages[{i}].tool_calls[{j}] has no function name")
                arguments = function.get("arguments")
                if isinstance(arguments, str):
                    with contextlib.suppress(ValueError):  # else kept as written: the template prints it as it is
                        arguments = json.loads(arguments) if arguments.strip() else {}
                calls.append(
                    {
                        "id": call.get("id"),
                        "type": "function",
                        "function": {"name": function["name"], "arguments": arguments},
                    }
                )
            message["tool_calls"] = calls
        if role == "tool":
            if m.get("tool_call_id"):
                message["tool_call_id"] = m["tool_call_id"]
            if m.get("name"):
                message["name"] = m["name"]
        out.append(message)
    return out


def _text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise ValueError(f"{where}: only text parts are supported, not {kind!r}")
        return "".join(parts)
    raise ValueError(f"{where} must be a string or a list of text parts")
