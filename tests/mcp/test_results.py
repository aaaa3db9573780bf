"""A call's result as the text the model reads (MCP results; function tools share the cut and the error prefix)."""

from __future__ import annotations

from mcp.types import CallToolResult, EmbeddedResource, ImageContent, TextContent, TextResourceContents

from trainctl.mcp.results import ERROR_PREFIX, MAX_RESULT_CHARS, cut, error_text, result_text


def test_each_kind_of_content_becomes_text():
    result = CallToolResult(
        content=[
            TextContent(type="text", text="42"),
            ImageContent(type="image", data="AA==", mime_type="image/png"),
            EmbeddedResource(type="resource", resource=TextResourceContents(uri="file:///notes.md", text="# notes")),
        ]
    )
    assert result_text(result) == ("42\n[image content]\n# notes", False)
    structured = CallToolResult(content=[], structured_content={"sum": 3, "note": "é"})
    assert result_text(structured) == ('{"sum": 3, "note": "é"}', False)
    failed = CallToolResult(content=[TextContent(type="text", text="division by zero")], is_error=True)
    assert result_text(failed) == ("division by zero", True)


def test_long_results_are_cut_and_errors_read_alike():
    long = "x" * (MAX_RESULT_CHARS + 10)
    text, _ = result_text(CallToolResult(content=[TextContent(type="text", text=long)]))
    assert text == cut(long) == "x" * MAX_RESULT_CHARS + "...(truncated)"
    assert cut("short") == "short"
    assert error_text("the call to 'f' timed out after 3 s") == f"{ERROR_PREFIX} the call to 'f' timed out after 3 s"
    assert error_text("Error: already said") == "Error: already said"
