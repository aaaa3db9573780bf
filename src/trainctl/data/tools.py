"""The arith data with a calculator tool: RL rows for verl's tool agent loop, and SFT demonstrations of tool use.

tool_rl   verl's RLHFDataset rows that run through `tool_agent` (verl/experimental/agent_loop/tool_agent_loop.py):
          the rl columns, plus `agent_name: tool_agent` and, in extra_info, `tools_kwargs` (per tool, what verl
          passes to the tool's create()) and `tool_selection` (the tools this row may call)
tool_sft  verl's MultiTurnSFTDataset rows that demonstrate the tool: `messages` (the question; an assistant turn with
          one hermes tool call to the calculator; the tool's answer; the final answer `#### N`) and `tools` (the
          schemas, rendered into the system turn exactly as the agent loop renders them in RL)

A random tiny model never writes a tool call; a short SFT warm start on tool_sft teaches the format, then GRPO on
tool_rl trains with the real tool.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from trainctl.data.arith import Problem, problems

FORMATS = ("tool_rl", "tool_sft")
TOOL_AGENT = "tool_agent"  # the name verl registers ToolAgentLoop under
CALCULATOR = "calculator"
TOOL_INSTRUCTION = 'Use the calculator, then give the final answer after "####".'
DATA_SOURCE = "openai/gsm8k"  # verl's gsm8k scorer reads the number after ####


def calculator_schema() -> dict:
    """The built-in calculator server's tool, as verl renders it into prompts (OpenAIFunctionToolSchema dumped
    without unset fields; the key order is the one verl's model_dump gives, which the chat template keeps)."""
    from trainctl.runtime.tools import calculator

    return {
        "type": "function",
        "function": {
            "name": calculator.NAME,
            "description": calculator.DESCRIPTION,
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string", "description": calculator.EXPRESSION_HELP}},
                "required": ["expression"],
            },
        },
    }


def expression(p: Problem) -> str:
    return f"{p.a} {p.op} {p.b}"


def prompt(p: Problem) -> list[dict]:
    return [{"role": "user", "content": f"{p.question} {TOOL_INSTRUCTION}"}]


def rl_row(p: Problem, index: int, split: str, tool_selection: list[str] | None = None) -> dict:
    truth = str(p.answer)
    info: dict = {
        "split": split,
        "index": index,
        "question": p.question,
        "answer": p.solution(),
        # verl's gsm8k tool example passes the ground truth to the tool's create(); MCP tools ignore it
        "tools_kwargs": {CALCULATOR: {"create_kwargs": {"ground_truth": truth}}},
    }
    if tool_selection:
        info["tool_selection"] = list(tool_selection)
    return {
        "data_source": DATA_SOURCE,
        "agent_name": TOOL_AGENT,
        "prompt": prompt(p),
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": truth},
        "extra_info": info,
    }


def tool_call_message(name: str, arguments: dict) -> dict:
    """An assistant turn that only calls a tool, in the OpenAI shape chat templates read. The arguments are kept
    as JSON text: a parquet struct would have to hold every tool's argument names at once."""
    call = {"type": "function", "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}
    return {"role": "assistant", "content": "", "tool_calls": [call]}


def sft_row(p: Problem, tools: list[dict] | None = None) -> dict:
    from trainctl.runtime.tools.calculator import calculate

    expr = expression(p)
    result = calculate(expr)  # what the server answers, from the server's own code
    messages = [
        *prompt(p),
        tool_call_message(CALCULATOR, {"expression": expr}),
        {"role": "tool", "content": result},
        {"role": "assistant", "content": f"{expr} = {result}\n#### {result}"},
    ]
    return {"messages": messages, "tools": tools if tools is not None else [calculator_schema()]}


def arith_rows(fmt: str, split: str, n: int, seed: int, tools: list[dict] | None = None) -> Iterator[dict]:
    """Rows of one tool format from the arith problems (the same problems, split for split, as arith.rows)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown tool data format {fmt!r}: one of {', '.join(FORMATS)}")
    for i, p in enumerate(problems(n, seed, split)):
        yield rl_row(p, i, split) if fmt == "tool_rl" else sft_row(p, tools)


def write_arith_tool_data(folder: Path, train_rows: int = 512, test_rows: int = 64, seed: int = 0) -> dict[str, Path]:
    """`folder/tool_rl/{train,test}.parquet` and `folder/tool_sft/{train,test}.parquet`; returns the files."""
    from trainctl.data.writer import write_rows

    out = {}
    for fmt in FORMATS:
        for split, n in (("train", train_rows), ("test", test_rows)):
            path = Path(folder) / fmt / f"{split}.parquet"
            write_rows(path, arith_rows(fmt, split, n, seed))
            out[f"{fmt}/{split}"] = path
    return out
