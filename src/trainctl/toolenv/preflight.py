"""The tokenization preflight: one scripted trajectory per server, through the real server and the model's chat
template, tokenized as verl's tool agent loop tokenizes it, before a training (or an eval) starts anything.

Multi-turn tool-call tokenization is the bug agent-RL users hit most, and verl finds it mid-run, on the GPUs: the
loop builds its token ids turn by turn (verl's Continuous Token builder: the prompt, then each generated turn
appended as the model produced it, each tool result rendered after a synthetic conversation and its suffix kept),
while the model was trained on, and the chat template renders, the whole conversation at once. Here, per server:

    the question (with every tool schema the run gives the model)
    turn 1  the assistant calls one of the server's tools: the tokens the model emits are the template's rendering
            of that turn, up to its stop token; verl's tool-call parser (tools.format) must read the call back
    turn 2  the tool's answer, from the real server, cut as verl cuts it (max_tool_response_length)
    turn 3  the assistant's final answer

and the checks: the turn-by-turn ids equal the whole conversation's (what verl's `tokenization_sanity_check_mode`
compares); the assistant mask (the tokens the loss trains on) is not empty; every stop token of the parser exists
in the tokenizer, and each assistant turn ends with a token generation stops at. A mismatch is one Problem naming the
first differing token and its turn.

Which tool is called (a preflight must not change anything on a server): a tool the server marks read-only
(MCP's readOnlyHint), with placeholder arguments from its schema; else a tool that requires arguments, called with
none (the server refuses them before anything runs, and its refusal is the tool turn); else the server is not called
and a placeholder stands for its answer (said in the result).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trainctl.errors import Problem

QUESTION = "What is 6 times 7? Use a tool."
FINAL_ANSWER = "The answer is 42."
PLACEHOLDER_RESULT = "42"


@dataclass
class Script:
    """One server's scripted tool call and the answer it gave."""

    server: str
    tool: str  # the name the model sees
    arguments: dict
    result: str  # the tool turn's content, as the model reads it
    called: bool  # False: the server was not called (a placeholder result)
    how: str  # why this tool and these arguments


@dataclass
class Outcome:
    """What the preflight found for one server's trajectory."""

    script: Script
    tokens: int = 0  # the trajectory's length in tokens
    trained: int = 0  # assistant tokens the loss trains on (the mask's ones)
    problems: list[Problem] = field(default_factory=list)


# -- which call ------------------------------------------------------------------------------------------------


def placeholder(schema: dict) -> Any:
    """A harmless value of a JSON schema: its example, default or first choice, else one of its type."""
    for key in ("examples", "default", "enum"):
        value = schema.get(key)
        if isinstance(value, list) and value:
            return value[0]
        if value is not None and key == "default":
            return value
    kind = schema.get("type")
    kind = next((k for k in kind if k != "null"), "string") if isinstance(kind, list) else kind
    return {"integer": 1, "number": 1, "boolean": True, "array": [], "object": {}}.get(kind or "string", "1")


def choose_call(tools: list, allowed: list[str] | None) -> tuple[str, dict, str] | None:
    """(tool, arguments, why) of a server's listing (mcp.types.Tool) for the scripted call; None: call nothing."""
    usable = [t for t in tools if allowed is None or t.name in allowed]
    for tool in usable:
        annotations = getattr(tool, "annotations", None)
        if annotations is not None and getattr(annotations, "read_only_hint", None):
            schema = tool.input_schema or {}
            props = schema.get("properties") or {}
            arguments = {k: placeholder(props.get(k) or {}) for k in schema.get("required") or []}
            return tool.name, arguments, "marked read-only by the server: called with placeholder arguments"
    for tool in usable:
        if (tool.input_schema or {}).get("required"):
            return tool.name, {}, "called without its required arguments: the server refuses them and runs nothing"
    return None


# -- the trajectory ----------------------------------------------------------------------------------------------


class _Turns:
    """The runtime token ids as verl's loop builds them, with each span's turn and the loss mask."""

    def __init__(self, ids: list[int]):
        self.ids = list(ids)
        self.mask: list[int] = []  # over the response (everything after the prompt)
        self.prompt = len(ids)
        self.spans: list[tuple[int, int, str]] = [(0, len(ids), "the prompt (system, question, tool schemas)")]

    def add(self, merge, builder, label: str) -> None:
        start = len(self.ids) - merge.removed_prefix_token_count
        self.mask, _ = builder.align_response_metadata(merge, self.mask)
        self.ids = list(merge.token_ids)
        self.spans.append((start, len(self.ids), label))

    def turn_of(self, index: int) -> str:
        """The turn the token at `index` belongs to (the last turn for an index past the end)."""
        return next((label for start, end, label in self.spans if start <= index < end), self.spans[-1][2])


def _ids(out: Any) -> list[int]:
    ids = out["input_ids"] if hasattr(out, "keys") else out
    return [int(i) for i in ids]


def check(
    tokenizer: Any,
    script: Script,
    schemas: list[dict],
    *,
    model_type: str | None,
    parser_format: str,
    stop_ids: set[int],
    chat_template_kwargs: dict | None = None,
) -> Outcome:
    """One server's scripted trajectory through the chat template and verl's Continuous Token builder."""
    from verl.experimental.agent_loop.tool_parser import ToolParser
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    kwargs = dict(chat_template_kwargs or {})
    outcome = Outcome(script)
    name = f"preflight of MCP server {script.server!r}" if script.server else "preflight"
    problem = _problem_maker(outcome, name, tokenizer)

    def render(messages: list[dict], generation: bool) -> list[int]:
        return _ids(
            tokenizer.apply_chat_template(
                messages, tools=schemas, tokenize=True, add_generation_prompt=generation, **kwargs
            )
        )

    builder = create_continuous_token_builder(tokenizer, hf_model_type=model_type, chat_template_kwargs=kwargs)
    parser = ToolParser.get_tool_parser(parser_format, tokenizer)
    messages: list[dict] = [{"role": "user", "content": QUESTION}]
    turns = _Turns(builder.build_initial_tokens(messages, tools=schemas))

    call = {"type": "function", "function": {"name": script.tool, "arguments": script.arguments}}
    assistant = {"role": "assistant", "content": "", "tool_calls": [call]}
    generated = _generated(render, messages, assistant, stop_ids, problem, "turn 1 (the assistant's tool call)")
    if generated is None:
        return outcome
    _, calls = asyncio.run(parser.extract_tool_calls(generated, None))
    if not any(c.name == script.tool for c in calls):
        problem(
            f"verl's {parser_format!r} parser (tools.format) does not read the tool call the chat template writes",
            details=[f"the call as the template writes it: {tokenizer.decode(generated)!r}"],
            hint="choose the parser of the model's call format (Qwen2.5/Qwen3: tools.format=hermes)",
        )
        return outcome
    turns.add(builder.merge_assistant_tokens(turns.ids, generated), builder, "turn 1 (the assistant's tool call)")

    before = [*messages, assistant]
    tool_turn = {"role": "tool", "content": script.result}
    label = f"turn 2 (the answer of {script.server}.{script.tool})" if script.server else "turn 2 (the tool's answer)"
    try:
        merge = builder.merge_context_tokens(before, [*before, tool_turn], turns.ids, tools=schemas)
    except Exception as e:
        problem(f"verl cannot append the tool's answer with this chat template: {type(e).__name__}: {e}")
        return outcome
    turns.add(merge, builder, label)

    final = {"role": "assistant", "content": FINAL_ANSWER}
    generated = _generated(render, [*before, tool_turn], final, stop_ids, problem, "turn 3 (the final answer)")
    if generated is None:
        return outcome
    turns.add(builder.merge_assistant_tokens(turns.ids, generated), builder, "turn 3 (the final answer)")

    whole = render([*before, tool_turn, final], False)
    outcome.tokens, outcome.trained = len(turns.ids), sum(turns.mask)
    _compare(turns, whole, tokenizer, problem)
    if not outcome.trained:
        problem(
            "the assistant mask is empty: none of the trajectory's tokens would be trained on",
            hint="check the chat template's assistant turns",
        )
    return outcome


def _problem_maker(outcome: Outcome, name: str, tokenizer: Any) -> Callable[..., None]:
    def problem(message: str, details: list[str] | None = None, hint: str | None = None) -> None:
        outcome.problems.append(
            Problem(
                f"{name}: {message}.",
                key="model",
                details=[*(details or []), f"the scripted call: {outcome.script.tool}({outcome.script.arguments})"],
                hint=hint
                or "fix the chat template (tokenizer_config.json or chat_template.jinja) so that a conversation "
                "renders the same turn by turn as at once",
            )
        )

    return problem


def _generated(render, messages, assistant, stop_ids, problem, label) -> list[int] | None:
    """The ids the model emits for `assistant` after `messages`: the template's rendering of the turn after the
    generation prompt, up to and with the first stop token."""
    prompt, full = render(messages, True), render([*messages, assistant], False)
    if full[: len(prompt)] != prompt:
        at = next((i for i, (a, b) in enumerate(zip(prompt, full, strict=False)) if a != b), len(prompt))
        problem(
            f"{label}: the chat template's generation prompt is not how it renders an assistant turn "
            f"(they differ at token {at})",
        )
        return None
    tail = full[len(prompt) :]
    end = next((i for i, t in enumerate(tail) if t in stop_ids), None)
    if end is None:
        problem(
            f"{label}: the chat template ends an assistant turn with no token generation stops at "
            f"(stop tokens: {sorted(stop_ids)})",
            hint="give the tokenizer (generation_config.json eos_token_id) the template's end-of-turn token",
        )
        return None
    return tail[: end + 1]


def _compare(turns: _Turns, whole: list[int], tokenizer: Any, problem) -> None:
    """The runtime ids against the whole conversation's: equal, but for whitespace the template adds after the
    last turn's stop token (verl's loop stops there)."""
    ids = turns.ids
    at = next((i for i, (a, b) in enumerate(zip(ids, whole, strict=False)) if a != b), None)
    if at is None:
        if len(ids) <= len(whole) and not tokenizer.decode(whole[len(ids) :]).strip():
            return
        at = min(len(ids), len(whole))

    def show(seq: list[int]) -> str:
        if at >= len(seq):
            return "(nothing: it ends there)"
        around = tokenizer.decode(seq[max(0, at - 8) : at + 8])
        return f"token {seq[at]} {tokenizer.convert_ids_to_tokens(seq[at])!r} in ...{around!r}..."

    problem(
        f"the trajectory tokenizes differently turn by turn than as a whole conversation, from token {at}, in "
        f"{turns.turn_of(at)}",
        details=[f"turn by turn (what verl's loop trains on): {show(ids)}", f"the whole conversation: {show(whole)}"],
    )


def stop_token_problems(tokenizer: Any, parser_format: str) -> list[Problem]:
    """The parser's stop tokens must be tokens of this tokenizer (a missing one maps to the unknown token or None,
    and generation would never stop after a call)."""
    from verl.experimental.agent_loop.tool_parser import ToolParser

    parser = ToolParser.get_tool_parser(parser_format, tokenizer)
    bad = []
    for token_id in parser.stop_token_ids:
        unknown = tokenizer.unk_token_id is not None and token_id == tokenizer.unk_token_id
        if token_id is None or not isinstance(token_id, int) or token_id < 0 or token_id >= len(tokenizer) or unknown:
            bad.append(repr(token_id))
    if not bad:
        return []
    return [
        Problem(
            f"verl's {parser_format!r} tool-call parser stops generation at token ids {', '.join(bad)}, which this "
            "tokenizer does not have: the model would never stop after a tool call.",
            key="tools.format",
            hint="choose the parser of the model's family (tools.format=hermes for Qwen2.5/Qwen3)",
        )
    ]


def stop_ids(tokenizer: Any, model_folder: str | None, parser_format: str) -> set[int]:
    """The token ids a rollout stops generating at: the model's eos ids (generation_config.json, the tokenizer's)
    and the parser's stop tokens."""
    from verl.experimental.agent_loop.tool_parser import ToolParser

    found: set[int] = set()
    if tokenizer.eos_token_id is not None:
        found.add(int(tokenizer.eos_token_id))
    if model_folder:
        import contextlib

        with contextlib.suppress(Exception):
            from transformers import GenerationConfig

            eos = GenerationConfig.from_pretrained(model_folder).eos_token_id
            found.update(int(e) for e in (eos if isinstance(eos, list) else [eos]) if e is not None)
    parser = ToolParser.get_tool_parser(parser_format, tokenizer)
    found.update(int(t) for t in parser.stop_token_ids if isinstance(t, int) and t >= 0)
    return found


# -- every server of a tools config ---------------------------------------------------------------------------


def scripts(cfg: Any, document: dict) -> list[Script]:
    """One scripted call per MCP server of the run's tool config (the server started or reached once more, the
    call made, the server stopped), or one placeholder call of a function tool when there are only functions."""
    from trainctl.mcp.discovery import probe
    from trainctl.mcp.results import as_verl_cuts
    from trainctl.mcp.specs import allowed_tools
    from trainctl.toolenv.servers import TRUNCATE_SIDE, specs

    tools = cfg.tools
    in_document = {e["config"]["server"] for e in document["tools"] if e["config"].get("server")}
    servers = {name: spec for name, (spec, _) in specs(tools).items() if name in in_document}
    out = []
    for name, spec in servers.items():
        chosen: dict[str, Any] = {}

        def choose(listed: list, name: str = name, chosen: dict = chosen) -> list[tuple[str, Any]]:
            found = choose_call(listed, allowed_tools(tools, name))
            if found is None:
                keep = allowed_tools(tools, name)
                usable = [t.name for t in listed if keep is None or t.name in keep]
                chosen["placeholder"] = usable[0] if usable else None
                return []
            chosen["tool"], chosen["arguments"], chosen["how"] = found
            return [(found[0], found[1])]

        _, answers = probe(spec, choose, timeout=tools.connect_timeout_s, call_timeout=tools.call_timeout_s)
        if answers:
            text = as_verl_cuts(answers[0].text, tools.max_tool_response_length, TRUNCATE_SIDE)
            out.append(Script(name, chosen["tool"], chosen["arguments"], text, True, chosen["how"]))
        elif chosen.get("placeholder"):
            how = "not called (no tool marked read-only, and every tool runs without arguments): a placeholder answer"
            out.append(Script(name, chosen["placeholder"], {}, PLACEHOLDER_RESULT, False, how))
    if not out:
        functions = [e for e in document["tools"] if "function" in e["config"]]
        if functions:
            schema = functions[0]["tool_schema"]["function"]
            props = (schema.get("parameters") or {}).get("properties") or {}
            required = (schema.get("parameters") or {}).get("required") or []
            arguments = {k: placeholder(props.get(k) or {}) for k in required}
            how = "a function tool, not called: a placeholder answer"
            out.append(Script("", schema["name"], arguments, PLACEHOLDER_RESULT, False, how))
    return out


def run(cfg: Any, document: dict, chat_template_kwargs: dict | None = None) -> tuple[list[Outcome], list[Problem]]:
    """The preflight of a run's tool config (cfg: the trainctl config; document: the run's tools.yaml): each
    server's scripted trajectory, and every problem found (empty: verl's loop will tokenize as the model reads)."""
    import json
    from pathlib import Path

    from trainctl.silence import library_logs
    from trainctl.toolenv.servers import load_tokenizer

    tokenizer, _ = load_tokenizer(cfg.model.path)
    if tokenizer is None:
        return [], []  # the model's files are checked elsewhere
    folder = Path(cfg.model.path).expanduser()
    try:
        model_type = json.loads((folder / "config.json").read_text()).get("model_type")
    except (OSError, ValueError):
        model_type = None
    schemas = [e["tool_schema"] for e in document["tools"]]
    with library_logs():
        problems = stop_token_problems(tokenizer, cfg.tools.format)
        stops = stop_ids(tokenizer, str(folder), cfg.tools.format)
        outcomes = [
            check(
                tokenizer,
                script,
                schemas,
                model_type=model_type,
                parser_format=cfg.tools.format,
                stop_ids=stops,
                chat_template_kwargs=chat_template_kwargs,
            )
            for script in scripts(cfg, document)
        ]
    for outcome in outcomes:
        problems += outcome.problems
    return outcomes, problems
