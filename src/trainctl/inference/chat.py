"""A conversation with a model in this process (`trainctl chat`): history, a system prompt, the temperature, and the
run's tools called as its tool loop calls them.

Each user turn renders the conversation so far with the chat template (as a client of `model serve` would send it),
then runs the tool loop of verl's ToolAgentLoop: generate; parse tool calls with the run's parser; call at most
max_parallel_calls tools; append their results as verl appends them (its continuous-token builder, token by token
after the model's own tokens); generate again, for at most tools.max_assistant_turns assistant turns. What happens is
reported through a callback as it happens (text as it is generated, each call and each result), for the terminal to
show; nothing here prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainctl.errors import TrainctlError
from trainctl.inference.engine import Batch, Loaded, stream
from trainctl.inference.prompts import Prompter, ToolCall
from trainctl.inference.text import TextStream
from trainctl.inference.tools import ToolBox, ToolResult, call_all
from trainctl.runtime.sampler import SamplingParams


@dataclass
class Event:
    """Something that happened during a turn: `text` (generated text, as it comes), `call` (a tool call the model
    wrote), `result` (its result), `notice` (why the turn stopped early)."""

    kind: str
    text: str = ""
    call: ToolCall | None = None
    result: ToolResult | None = None


class Conversation:
    def __init__(
        self,
        loaded: Loaded,
        batch: Batch,
        prompter: Prompter,
        *,
        temperature: float,
        top_p: float,
        top_k: int,
        max_tokens: int,
        context_length: int | None,
        tools: ToolBox | None = None,
    ):
        self.loaded = loaded
        self.batch = batch
        self.prompter = prompter
        self.tokenizer = loaded.tokenizer
        self.temperature, self.top_p, self.top_k, self.max_tokens = temperature, top_p, top_k, max_tokens
        self.context_length = context_length
        self.tools = tools
        self.system: str | None = None
        self.messages: list[dict] = []

    # --- the commands ---

    def reset(self) -> None:
        self.messages = []

    def set_system(self, text: str) -> None:
        """A new system prompt (empty: none) starts a new conversation: what came before was said under another."""
        self.system = text or None
        self.reset()

    def set_temperature(self, value: str) -> float:
        try:
            t = float(value)
        except ValueError:
            raise TrainctlError(f"/temp {value}: not a number.", hint="/temp 0.7   (0 is greedy)") from None
        if t < 0:
            raise TrainctlError(f"/temp {value}: a temperature is >= 0.", hint="/temp 0.7   (0 is greedy)")
        self.temperature = t
        return t

    # --- a turn ---

    def conversation(self) -> list[dict]:
        return ([{"role": "system", "content": self.system}] if self.system else []) + self.messages

    def say(self, text: str, on_event: Callable[[Event], None]) -> str:
        """The model's answer to `text` (its last assistant turn's text), with the tool calls it makes on the way.
        Interrupted (Ctrl-C), the conversation is as it was before."""
        before = list(self.messages)
        try:
            return self._turn(text, on_event)
        except BaseException:
            self.messages = before
            raise

    def _turn(self, text: str, on_event: Callable[[Event], None]) -> str:
        schemas = self.tools.schemas if self.tools else None
        self.messages.append({"role": "user", "content": text})
        builder = self.prompter.builder()
        history = self.conversation()
        prompt = list(builder.build_initial_tokens(history, tools=schemas))
        turns = self.tools.max_assistant_turns if self.tools else 1
        answer = ""
        for turn in range(turns):
            room = (self.context_length - len(prompt)) if self.context_length else self.max_tokens
            if room < 1:
                self._notice(on_event, f"the conversation fills the model's context ({self.context_length} tokens)")
                break
            ids, finish = self._generate(prompt, min(self.max_tokens, room), on_event)
            text, calls = self._read(ids, on_event)
            answer = text or ""
            message: dict[str, Any] = {"role": "assistant", "content": answer}
            if calls:
                message["tool_calls"] = [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.parsed_arguments()}}
                    for c in calls[: self.tools.max_parallel_calls]
                ]
            self.messages.append(message)
            if finish == "length":
                self._notice(on_event, f"stopped at max_tokens ({min(self.max_tokens, room)})")
            if not calls:
                break
            if turn == turns - 1:
                self._notice(on_event, f"no tool calls after {turns} assistant turns (tools.max_assistant_turns)")
                break
            for call in calls[: self.tools.max_parallel_calls]:
                on_event(Event("call", call=call))
            results = call_all(self.tools, calls)
            previous = self.conversation()
            for call, result in zip(calls, results, strict=False):
                on_event(Event("result", call=call, result=result))
                self.messages.append({"role": "tool", "content": result.text, "tool_call_id": call.id})
            # as verl's tool loop: the model's own tokens stay, the results are appended after them
            merged = builder.merge_context_tokens(previous, self.conversation(), prompt + ids, tools=schemas)
            prompt = list(merged.token_ids)
        return answer

    def _notice(self, on_event, text: str) -> None:
        on_event(Event("notice", text))

    def _generate(self, prompt: list[int], max_tokens: int, on_event) -> tuple[list[int], str]:
        stop_ids = self.prompter.stop_token_ids if self.tools else []
        params = SamplingParams(
            max_tokens=max_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            stop_token_ids=tuple(stop_ids),
        )
        marker = getattr(self.prompter.parser, "tool_call_start_token", None) if self.tools else None
        self._stream = TextStream(self.tokenizer, markers=[marker] if marker else [])
        completion = None
        for update in stream(self.batch, prompt, params):
            piece = self._stream.push(update.tokens)
            if piece:
                on_event(Event("text", piece))
            completion = update.done
        return completion.token_ids, completion.finish_reason

    def _read(self, ids: list[int], on_event) -> tuple[str | None, list[ToolCall]]:
        """The answer's text and its tool calls; the text still unshown is reported."""
        calls: list[ToolCall] = []
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        if self.tools:
            body = ids[:-1] if ids and ids[-1] in self.loaded.eos_ids else ids
            content, calls = asyncio.run(self.prompter.tool_calls(body))
            if calls:
                text = content or ""
        rest = self._stream.finish(text)
        if rest:
            on_event(Event("text", rest))
        return text, calls


def _import_the_model_code() -> None:
    with contextlib.suppress(Exception):  # the same imports fail again, with their message, where they are needed
        import transformers  # noqa: F401
        from transformers import AutoModelForCausalLM  # noqa: F401
        from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder  # noqa: F401


def start(served, status: Callable[[str], None] | None = None) -> Conversation:
    """Check the tools (starting and listing each MCP server, as a launch does), then merge and load the model.
    Everything that can fail for a config reason fails before the model is loaded."""
    from trainctl.inference.engine import load
    from trainctl.inference.model import context_length
    from trainctl.inference.tools import load_tools

    say = status or (lambda _: None)
    preload = threading.Thread(target=_import_the_model_code, daemon=True)
    preload.start()  # while the tools' servers start and list (they wait on other processes)
    tools = load_tools(served.plan)
    if tools is not None:
        tools.warm()  # MCP servers start while the model loads
    if served.resolved.kind in ("run", "checkpoint") and served.target.folder is None:
        say(f"Merging {served.target.source} into the cache (once; verified, as `trainctl ckpt merge` does)")
    if served.engine == "vllm":
        from trainctl.inference import vllm

        vllm.preflight(served)
    folder = served.folder("chat")
    say(f"Loading {folder}")
    if served.engine == "vllm":
        from trainctl.runtime.sampler import load_tokenizer

        loaded = Loaded(None, *load_tokenizer(str(folder)), folder)
        batch = vllm.Batch(
            folder,
            served.cfg.hardware.device,
            served.value,
            seed=served.sampling.seed,
            max_model_len=context_length(folder),
        )
    else:
        loaded = load(folder, served.cfg.hardware.attn_implementation or "sdpa")
        batch = Batch(loaded, seed=served.sampling.seed)
    prompter = Prompter(loaded.tokenizer, folder, served.chat_template_kwargs, served.tool_format)
    s = served.sampling
    return Conversation(
        loaded,
        batch,
        prompter,
        temperature=s.temperature,
        top_p=s.top_p,
        top_k=s.top_k,
        max_tokens=s.max_tokens,
        context_length=context_length(folder),
        tools=tools,
    )
