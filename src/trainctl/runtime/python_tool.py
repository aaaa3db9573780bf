"""Python functions as verl tools (tools.functions: `path/to/file.py:function` or `package.module:function`).

verl 0.9.1 has its own function tools (`multi_turn.function_tool_path`, a file of `@function_tool` functions), but
they have no timeout, log nothing and must be decorated in the user's file. This tool class calls a plain function
named in the config instead, with the same schema rules as verl's (type hints and a Google-style docstring, read by
transformers' `get_json_schema`), a timeout, and a line per call in the run's call log (the tool metrics read it),
the same as the MCP bridge writes. A function that raises or times out gives the model an error text; the
trajectory goes on. (A timed-out call's thread cannot be killed: it finishes in the background.)

The plan checks each spec and reads each schema (trainctl.checks.tools, with `split_spec`, `load_function` and
`function_schema` here); trainctl.backends.tools writes the tools.yaml entries. verl names the class by dotted path in
tools.yaml, and run folders keep theirs: `trainctl.runtime.python_tool.PythonFunctionTool` must stay importable under
this name for a run to resume.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import importlib.util
import inspect
import json
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainctl.errors import TrainctlError
from trainctl.mcp.results import ERROR_PREFIX, cut
from trainctl.mcp.schemas import openai_tool_schema
from trainctl.runtime.lazy import lazy_classes
from trainctl.runtime.tool_calls import CallLog

DEFAULT_TIMEOUT = 30.0


def split_spec(spec: str) -> tuple[str, str]:
    """(file or module, function) of `path/to/file.py:function` or `package.module:function`."""
    where, sep, name = str(spec).rpartition(":")
    if not sep or not where or not name.isidentifier():
        raise TrainctlError(
            f"tools.functions: {spec!r} is not path/to/file.py:function or package.module:function.",
            hint="e.g. tools.functions=[tools/search.py:search]",
        )
    return where, name


def is_file(where: str) -> bool:
    return where.endswith(".py") or "/" in where or where.startswith(("~", "."))


def load_function(spec: str) -> Callable:
    """The function a spec names (its file executed once per process, as verl loads function_tool_path files)."""
    where, name = split_spec(spec)
    if is_file(where):
        path = Path(where).expanduser().resolve()
        if not path.is_file():
            raise TrainctlError(f"tools.functions: {path} does not exist (in {spec!r}).")
        module = _module_from_file(str(path))
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as e:
            raise TrainctlError(f"tools.functions: cannot import {where!r} (in {spec!r}): {e}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        found = sorted(n for n, v in vars(module).items() if inspect.isfunction(v) and not n.startswith("_"))
        raise TrainctlError(
            f"tools.functions: {where} has no function {name!r} (in {spec!r}).",
            hint=f"functions there: {', '.join(found) or 'none'}",
        )
    return fn


@functools.cache
def _module_from_file(path: str):
    module_name = "_trainctl_tools_" + path.replace("/", "_").replace(".", "_").replace("-", "_")
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise TrainctlError(f"tools.functions: cannot load {path}.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        sys.modules.pop(module_name, None)
        raise TrainctlError(f"tools.functions: {path} fails to import: {type(e).__name__}: {e}") from None
    return module


def function_schema(fn: Callable, spec: str) -> dict:
    """The OpenAI tool schema of a function, read from its type hints and docstring (verl's rule), in the shape the
    MCP bridge gives MCP tools (so both render alike in prompts)."""
    from transformers.utils import get_json_schema

    try:
        raw = get_json_schema(fn)
    except Exception as e:  # DocstringParsingException, TypeHintParsingException
        raise TrainctlError(
            f"tools.functions: {spec!r} has no schema a model can read: {e}",
            hint="give every parameter a type hint and describe it in a Google-style docstring (Args: name: text)",
        ) from None
    function = raw["function"]
    return openai_tool_schema(
        {
            "name": function["name"],
            "description": function.get("description") or function["name"],
            "input_schema": function.get("parameters") or {},
        }
    )


def result_text(value: Any) -> str:
    """What the model reads of a function's return value: a string as it is, anything else as JSON."""
    return cut(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str))


async def call_function(fn: Callable, arguments: dict, timeout: float) -> tuple[str, bool]:
    """(text for the model, is_error): the function's result, or why there is none."""
    if not isinstance(arguments, dict):
        return f"{ERROR_PREFIX} arguments must be a JSON object, not {type(arguments).__name__}", True
    try:
        if inspect.iscoroutinefunction(fn):
            value = await asyncio.wait_for(fn(**arguments), timeout)
        else:
            value = await asyncio.wait_for(asyncio.to_thread(fn, **arguments), timeout)
    except TimeoutError:
        return f"{ERROR_PREFIX} the call to {fn.__name__!r} timed out after {timeout:g} s", True
    except asyncio.CancelledError:
        raise
    except Exception as e:
        return f"{ERROR_PREFIX} {type(e).__name__}: {e}", True
    return result_text(value), False


def _function_tool_class():
    from verl.tools.base_tool import BaseTool
    from verl.tools.schemas import ToolResponse

    class PythonFunctionTool(BaseTool):
        """A Python function as verl's tool agent loop calls it (config: trainctl.backends.tools)."""

        def __init__(self, config: dict, tool_schema):
            super().__init__(config, tool_schema)
            self.spec = config["function"]
            self.timeout = float(config.get("timeout", DEFAULT_TIMEOUT))
            self.log = CallLog(config["call_log_dir"]) if config.get("call_log_dir") else None
            self._fn: Callable | None = None

        async def create(self, instance_id: str | None = None, **kwargs) -> tuple[str, ToolResponse]:
            return instance_id or uuid.uuid4().hex, ToolResponse()

        async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs):
            agent_data = kwargs.get("agent_data")
            start = time.perf_counter()
            try:
                if self._fn is None:
                    self._fn = load_function(self.spec)
                text, error = await call_function(self._fn, parameters, self.timeout)
            except TrainctlError as e:
                text, error = f"{ERROR_PREFIX} {e.message}", True
            seconds = time.perf_counter() - start
            if self.log is not None:
                self.log.write(
                    {
                        "time": time.time(),
                        "trajectory": getattr(agent_data, "request_id", None),
                        "server": None,
                        "function": self.spec,
                        "tool": self.name,
                        "arguments": parameters,
                        "result": text,
                        "error": error,
                        "seconds": round(seconds, 6),
                    }
                )
            return ToolResponse(text=text), 0.0, {"tool_seconds": seconds, "tool_error": int(error)}

    return PythonFunctionTool


# verl imports tool classes by dotted path; the class is built on first use so that plan time does not import verl
CLASS_NAME = f"{__name__}.PythonFunctionTool"
__getattr__ = lazy_classes(__name__, {"PythonFunctionTool": _function_tool_class})
