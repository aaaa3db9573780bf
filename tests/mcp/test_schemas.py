"""MCP tool schemas as the OpenAI function schemas verl validates and renders."""

from __future__ import annotations

from trainctl.mcp.schemas import openai_tool_schema


def test_schemas_become_what_verl_validates():
    from verl.tools.schemas import OpenAIFunctionToolSchema

    tool = {
        "name": "search",
        "input_schema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "what to look for"},
                "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None, "title": "Limit"},
                "mode": {"enum": ["fast", "exact"]},
                "filters": {"type": "object", "properties": {"lang": {"type": "string"}}},
                "anything": {},
            },
            "required": ["query", "ghost"],
        },
    }
    schema = openai_tool_schema(tool)
    OpenAIFunctionToolSchema.model_validate(schema)
    assert schema["function"]["description"] == "search"
    assert schema["function"]["parameters"]["properties"] == {
        "query": {"type": "string", "description": "what to look for"},
        "limit": {"type": ["integer", "null"], "description": "Limit"},
        "mode": {"type": "string", "enum": ["fast", "exact"]},
        "filters": {"type": "object"},
        "anything": {"type": "string"},
    }
    assert schema["function"]["parameters"]["required"] == ["query"]


def test_an_mcp_tool_object_and_the_name_the_model_sees():
    from mcp.types import Tool

    tool = Tool(
        name="add",
        title="Add two numbers",
        inputSchema={"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
    )
    schema = openai_tool_schema(tool, "calc__add")
    assert schema["function"]["name"] == "calc__add"
    assert schema["function"]["description"] == "Add two numbers", "the title stands in for a missing description"
    assert schema["function"]["parameters"] == {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "required": ["a"],
    }
