"""A tool call's result as the text the model reads, for MCP tools and function tools alike (the worker-side tool
classes and, at plan time, anything that calls a tool to show what the model would see)."""

from __future__ import annotations

import json
from typing import Any

# a result as the model sees it is cut here; verl cuts again to multi_turn.max_tool_response_length
MAX_RESULT_CHARS = 100_000
# the start of every error text the model reads (a tool that failed, raised or timed out)
ERROR_PREFIX = "Error:"


def cut(text: str) -> str:
    """`text`, cut at MAX_RESULT_CHARS."""
    return text if len(text) <= MAX_RESULT_CHARS else text[:MAX_RESULT_CHARS] + "...(truncated)"


def result_text(result: Any) -> tuple[str, bool]:
    """The text the model reads from an MCP CallToolResult, and whether the server flagged it as an error."""
    parts = []
    for block in result.content or []:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and getattr(getattr(block, "resource", None), "text", None) is not None:
            parts.append(block.resource.text)
        else:
            parts.append(f"[{kind} content]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return cut("\n".join(parts)), bool(result.is_error)


def error_text(reason: str) -> str:
    """What the model reads for a call that gave no result, or an error result (`reason` without the prefix)."""
    return reason if reason.startswith(ERROR_PREFIX) else f"{ERROR_PREFIX} {reason}"


def as_verl_cuts(text: str, limit: int, side: str = "middle") -> str:
    """`text` as verl's tool agent loop hands it to the model: cut to `limit` characters
    (multi_turn.max_tool_response_length) on `side` (multi_turn.tool_response_truncate_side), as verl 0.9.1 does
    in ToolAgentLoop._call_tool."""
    if not text or len(text) <= limit:
        return text
    if side == "left":
        return "(truncated)..." + text[-limit:]
    if side == "right":
        return text[:limit] + "...(truncated)"
    half = limit // 2
    return text[:half] + "...(truncated)..." + text[-half:]
