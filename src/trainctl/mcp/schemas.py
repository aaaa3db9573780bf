"""An MCP tool's input schema as the OpenAI function tool schema verl validates (OpenAIFunctionToolSchema) and
renders into prompts; function tools (trainctl.runtime.python_tool) go through the same conversion, so that both
kinds render alike."""

from __future__ import annotations

from typing import Any

_JSON_TYPES = ("string", "number", "integer", "boolean", "array", "object", "null")


def _property(schema: Any) -> dict:
    """One parameter in the shape verl's OpenAIFunctionPropertySchema takes (type, description, enum).

    verl keeps only those three keys; a type given through anyOf/oneOf (Optional[int] from pydantic) becomes a list
    of types, and a parameter with no type at all is passed as a string (the model writes JSON text for it)."""
    schema = schema if isinstance(schema, dict) else {}
    kind = schema.get("type")
    if kind is None:
        options = schema.get("anyOf") or schema.get("oneOf") or []
        kinds = [o.get("type") for o in options if isinstance(o, dict) and isinstance(o.get("type"), str)]
        kind = kinds[0] if len(kinds) == 1 else (kinds or None)
    if "enum" in schema and kind is None:
        kind = "string"
    if kind is None or (isinstance(kind, str) and kind not in _JSON_TYPES):
        kind = "string"
    out: dict[str, Any] = {"type": kind}
    description = schema.get("description") or schema.get("title")
    if description:
        out["description"] = str(description)
    if isinstance(schema.get("enum"), list):
        out["enum"] = schema["enum"]
    return out


def openai_tool_schema(tool: Any, name: str | None = None) -> dict:
    """An MCP tool (mcp.types.Tool or its dict) as an OpenAI function tool schema verl validates; `name`: the name
    the model sees, when it is not the server's."""
    data = tool if isinstance(tool, dict) else tool.model_dump(by_alias=False, exclude_none=True)
    params = data.get("input_schema") or data.get("inputSchema") or {}
    properties = params.get("properties") or {}
    return {
        "type": "function",
        "function": {
            "name": name or data["name"],
            "description": data.get("description") or data.get("title") or data["name"],
            "parameters": {
                "type": "object",
                "properties": {k: _property(v) for k, v in properties.items()},
                "required": [r for r in params.get("required", []) if r in properties],
            },
        },
    }
