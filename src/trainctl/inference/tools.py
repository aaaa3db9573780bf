"""The run's tools for `trainctl chat tools=...`: the MCP servers and Python functions a training run would give the
model, checked and listed as a launch checks them (trainctl.checks.tools), and called through the same tool classes
verl's tool agent loop calls in a run (trainctl.runtime.mcp_bridge.MCPTool, trainctl.runtime.python_tool), with the
loop's own rules: unknown tools and arguments that are not JSON answer with an error text, results are cut to
tools.max_tool_response_length on verl's side (multi_turn.tool_response_truncate_side).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import io
import json
from dataclasses import dataclass, field
from typing import Any

from trainctl.errors import ConfigProblems
from trainctl.mcp.results import ERROR_PREFIX

# what the launch checks say about a training trajectory's token budgets and the training data's rows: a chat has
# neither (each answer gets max_tokens of its own; tool results do not count against it)
_TRAINING_ONLY = {
    "data.max_response_length",
    "data.max_prompt_length",
    "tools.max_tool_response_length",
    "data.train_files",
    "data.val_files",
}


@dataclass
class ToolResult:
    name: str
    arguments: Any
    text: str
    error: bool
    seconds: float


@dataclass
class ToolBox:
    """The tools of one config, ready to call."""

    schemas: list[dict]  # OpenAI function schemas, as the chat template renders them
    tools: dict[str, Any]  # name -> verl BaseTool instance
    sources: dict[str, str] = field(default_factory=dict)  # name -> "MCP server calculator" / "function f.py:f"
    max_response_length: int = 256
    truncate_side: str = "middle"
    max_parallel_calls: int = 1
    max_assistant_turns: int = 3

    @property
    def names(self) -> list[str]:
        return list(self.tools)

    async def call(self, name: str, arguments: str) -> ToolResult:
        """One call as verl's tool loop makes it (create, execute, release); never raises for the tool's failures."""
        import time

        start = time.perf_counter()
        tool = self.tools.get(name)
        if tool is None:
            text = f"Unknown function '{name}'. Available tools: {self.names}"
            return ToolResult(name, arguments, text, True, 0.0)
        try:
            parsed = json.loads(arguments)
        except (ValueError, TypeError) as e:
            return ToolResult(name, arguments, f"Invalid JSON in arguments for '{name}': {e}", True, 0.0)
        instance_id = None
        try:
            instance_id, _ = await tool.create(create_kwargs={})
            response, _, _ = await tool.execute(instance_id, parsed)
            text = response.text or ""
        except Exception as e:
            text = f"Error executing tool '{name}': {e}"
        finally:
            if instance_id is not None:
                await tool.release(instance_id)
        return ToolResult(name, parsed, self._cut(text), text.startswith(ERROR_PREFIX), time.perf_counter() - start)

    def _cut(self, text: str) -> str:
        limit = self.max_response_length
        if not text or len(text) <= limit:
            return text
        if self.truncate_side == "left":
            return "(truncated)..." + text[-limit:]
        if self.truncate_side == "right":
            return text[:limit] + "...(truncated)"
        half = limit // 2
        return text[:half] + "...(truncated)..." + text[-half:]

    def warm(self) -> None:
        """Start connecting to each MCP server now, in the bridge's thread (a stdio server takes seconds to start),
        so that the first call does not wait for it; a connection that fails is the first call's error."""
        from trainctl.runtime.mcp_bridge import MCPTool, bridge

        seen = set()
        for tool in self.tools.values():
            if not isinstance(tool, MCPTool) or tool.session != "shared":
                continue
            try:
                spec = tool.spec()
            except Exception:
                continue
            if spec not in seen:
                seen.add(spec)
                b = bridge()
                # the key MCPTool uses for a shared session: its calls find this connection open
                b.submit(b.connection(("shared", spec), spec, tool.connect_timeout))

    def close(self) -> None:
        """Stop the MCP servers this process started (stdio) and close its connections."""
        from trainctl.runtime.mcp_bridge import bridge

        bridge().shutdown()


def load_tools(plan) -> ToolBox | None:
    """The tools the config gives the model (None for tools=none), checked and listed as a launch does: every
    server entry, every function's schema, the template against the tools. Raises ConfigProblems."""
    from trainctl.backends import tools as verl_tools
    from trainctl.checks import tools as tool_checks

    cfg = plan.cfg
    if not verl_tools.enabled(cfg.tools):
        return None
    s = plan.subject
    problems = [p for p in tool_checks.checks(s) if p.key not in _TRAINING_ONLY]
    if not any(p.is_error for p in problems):
        problems += [p for p in tool_checks.probes(s) if p.key not in _TRAINING_ONLY]
    errors = [p for p in problems if p.is_error]
    if errors:
        raise ConfigProblems(errors, [p for p in problems if not p.is_error])
    document = s.extra["tools"]["document"]
    return toolbox(document, plan)


def toolbox(document: dict, plan) -> ToolBox:
    """Instantiate the tool classes of a tools.yaml document, as verl's tool registry does."""
    from verl.tools.schemas import OpenAIFunctionToolSchema

    tools, sources, schemas = {}, {}, []
    for entry in document["tools"]:
        module, _, cls_name = entry["class_name"].rpartition(".")
        cls = getattr(importlib.import_module(module), cls_name)
        config = {k: v for k, v in entry["config"].items() if k != "call_log_dir"}  # a chat keeps no call log
        schema = OpenAIFunctionToolSchema.model_validate(entry["tool_schema"])
        with contextlib.redirect_stdout(io.StringIO()):  # verl's BaseTool prints its schema to stdout
            tool = cls(config=config, tool_schema=schema)
        tools[schema.function.name] = tool
        schemas.append(entry["tool_schema"])
        where = config.get("server")
        sources[schema.function.name] = f"MCP server {where}" if where else f"function {config.get('function')}"
    t = plan.cfg.tools
    side = plan.value("actor_rollout_ref.rollout.multi_turn.tool_response_truncate_side") or "middle"
    return ToolBox(
        schemas,
        tools,
        sources,
        max_response_length=int(t.max_tool_response_length),
        truncate_side=str(side),
        max_parallel_calls=int(t.max_parallel_calls),
        max_assistant_turns=int(t.max_assistant_turns),
    )


def call_all(box: ToolBox, calls) -> list[ToolResult]:
    """Run a turn's calls (at most max_parallel_calls, as the tool loop does) concurrently; results in order."""

    async def run():
        return await asyncio.gather(*(box.call(c.name, c.arguments) for c in calls[: box.max_parallel_calls]))

    return list(asyncio.run(run()))
