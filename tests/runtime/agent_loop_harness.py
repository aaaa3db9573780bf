"""verl's real ToolAgentLoop, in this process, with a scripted language model.

Everything is verl's or ours except the model: the tool loop (verl/experimental/agent_loop/tool_agent_loop.py), its
hermes parser, its Continuous Token prompt building with the tiny model's chat template, verl's tool loader
(tool_config_path / function_tool_path), trainctl's MCP bridge and real MCP server processes. The model's turns are
given as text, so a test decides what the model "says" and checks what the loop makes of it. Real models run in the
GRPO tests (tests/launch/test_agent_grpo.py).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any


class ScriptedModel:
    """Stands in for the rollout server: verl's loop calls generate() token-in, token-out; each call answers the
    next scripted reply (followed by <|im_end|>) and records the prompt it was given."""

    def __init__(self, tokenizer, replies: list[str]):
        self.tokenizer = tokenizer
        self.replies = list(replies)
        self.prompts: list[list[int]] = []
        self.sampling_params: list[dict] = []

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.prompts.append(list(prompt_ids))
        self.sampling_params.append(dict(sampling_params))
        text = self.replies.pop(0) if self.replies else "(no more scripted replies)"
        ids = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids), stop_reason="completed")

    def prompt_text(self, i: int) -> str:
        return self.tokenizer.decode(self.prompts[i])


def loop_config(
    model: Path,
    tool_config_path: str | Path | None = None,
    function_tool_path: str | Path | None = None,
    max_prompt_length: int = 1024,
    max_response_length: int = 512,
    **multi_turn: Any,
):
    """verl's ppo_trainer defaults with the multi-turn keys a tools run sets."""
    from omegaconf import OmegaConf

    from trainctl.backends.verl import verl_defaults

    cfg = verl_defaults("ppo_trainer")
    OmegaConf.update(cfg, "actor_rollout_ref.model.path", str(model))
    OmegaConf.update(cfg, "data.max_prompt_length", max_prompt_length)
    OmegaConf.update(cfg, "data.max_response_length", max_response_length)
    settings = {
        "enable": True,
        "format": "hermes",
        "tool_config_path": str(tool_config_path) if tool_config_path else None,
        "function_tool_path": str(function_tool_path) if function_tool_path else None,
        **multi_turn,
    }
    for key, value in settings.items():
        OmegaConf.update(cfg, f"actor_rollout_ref.rollout.multi_turn.{key}", value)
    return cfg


async def _run(cfg, model: ScriptedModel, messages: list[dict], extra_info: dict | None):
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
    from verl.tools.tool_registry import load_all_tools
    from verl.utils.dataset.rl_dataset import RLHFDataset

    multi_turn = cfg.actor_rollout_ref.rollout.multi_turn
    tools = load_all_tools(multi_turn.tool_config_path, multi_turn.function_tool_path)
    loop = ToolAgentLoop(
        trainer_config=DictConfigWrap(cfg),
        server_manager=model,
        tokenizer=model.tokenizer,
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(cfg.data),
        hf_model_type="qwen2",
        tools=ToolListWrap(tools),
    )
    extra_info = extra_info or {}
    return await loop.run(
        {"temperature": 1.0, "logprobs": True},
        raw_prompt=messages,
        tools_kwargs=extra_info.get("tools_kwargs", {}),
        extra_info=extra_info,
    )


def run_tool_loop(cfg, tokenizer, replies: list[str], messages: list[dict], extra_info: dict | None = None):
    """(verl's AgentLoopOutput, the scripted model with the prompts it saw)."""
    model = ScriptedModel(tokenizer, replies)
    output = asyncio.run(_run(cfg, model, messages, extra_info))
    return output, model


def tool_call(name: str, **arguments) -> str:
    """What a model emits to call a tool in the hermes format."""
    import json

    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"
