"""Agent eval (`trainctl eval MODEL tools=...`): the test split through verl's own tool agent loop, in this process.

A run with tools trains and validates through verl's ToolAgentLoop (verl/experimental/agent_loop/tool_agent_loop.py)
calling trainctl's `hf` rollout server. Eval runs the same two pieces here, rather than a loop of its own that could
drift from verl's: the loop class itself (the chat template with the tool schemas, the hermes parser, the turn and
token budgets, tool results cut as verl cuts them), instantiated as verl's agent-loop worker instantiates it, and
trainctl.runtime.hf_rollout.HFRolloutServer as the server it calls (the batched sampler, greedy at temperature 0, each
turn's max tokens from the prompt + response budget). The tools are the run's own tool classes, loaded by verl's
tool registry from a tools.yaml written into eval's folder (MCP servers through the bridge, Python functions), so each
call is logged as a training run logs it (<out>/tools/calls/), and the calculator's own log lands in <out>/tools/.

What a trajectory returns (its response ids: generated turns and tool results, as verl's validation scores them)
is scored by eval's Scorer; its messages become the saved turns (trainctl.runtime.trajectories.turns_of, as in a
run's rollouts/) and its calls are read back from the call log by the trajectory's request id.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainctl.errors import ConfigProblems, Problem

CONFIG_FILE = "tools.yaml"  # in eval's folder: the tool config the loop reads, as a run's
CALLS_DIR = "tools/calls"  # in eval's folder: every call, one JSON line each


@dataclass
class AgentTools:
    """What prepare() found for an agent eval: the tool config and where its calls are logged."""

    document: dict  # tools.yaml, as trainctl.checks.tools built it for the plan
    config_file: Path
    calls_dir: Path
    names: list[str] = field(default_factory=list)  # the tool names the model sees


@dataclass
class Trajectory:
    prompt_ids: list[int]  # the first prompt (with the tool schemas), as the loop built it
    response_ids: list[int]  # every turn after it: generated tokens and tool results
    truncated: bool  # stopped by the response budget
    num_turns: int  # verl's count: user + assistant turns + 1
    turns: list[dict]  # role, content, tool_calls: trainctl.runtime.trajectories.turn
    request_id: str  # the call log's `trajectory`
    calls: list[dict] = field(default_factory=list)  # the call log's records of this trajectory


def uses_tools(plan: Any) -> bool:
    from trainctl.backends.tools import enabled

    return enabled(plan.cfg.tools)


def prepare_tools(plan: Any, out_dir: Path, run_dir: Path | None) -> tuple[AgentTools, list[Problem]]:
    """Check and list the tools as a launch does (the servers started or connected, their tools listed), run the
    tokenization preflight through the real servers, and compare the servers with those a run was trained with.
    Raises ConfigProblems (every error at once); returns the tools and the warnings."""
    from trainctl.checks import tools as tool_checks
    from trainctl.toolenv import identity, preflight

    s = plan.subject
    # the training data's rows and a trajectory's budgets concern training; eval reads the test split itself
    training_only = {"data.train_files", "data.val_files"}
    problems = [p for p in tool_checks.checks(s) if p.key not in training_only]
    if not any(p.is_error for p in problems):
        problems += tool_checks.probes(s)
    errors = [p for p in problems if p.is_error]
    warnings = [p for p in problems if not p.is_error]
    if errors:
        raise ConfigProblems(errors, warnings)
    found = s.extra["tools"]
    document = found["document"]
    kwargs = plan.value("data.apply_chat_template_kwargs")
    _, found_problems = preflight.run(plan.cfg, document, dict(kwargs) if kwargs else None)
    if found_problems:
        raise ConfigProblems(found_problems, warnings)
    if run_dir is not None:
        before = identity.saved(run_dir)
        now = identity.environment(found.get("servers") or {}, found.get("functions"), run_dir=out_dir)
        for change in identity.changes(before, now) if before else []:
            warnings.append(
                Problem(
                    f"the tool servers differ from those {run_dir.name} was trained with: {change}",
                    key="tools",
                    hint=f"trainctl runs show {run_dir} (its lock.json records the servers it trained with)",
                    severity="warning",
                )
            )
    names = [e["tool_schema"]["function"]["name"] for e in document["tools"]]
    return AgentTools(document, out_dir / CONFIG_FILE, out_dir / CALLS_DIR, names), warnings


def write_config(tools: AgentTools) -> None:
    from trainctl.backends.tools import write_tool_config

    write_tool_config(tools.config_file, tools.document)
    tools.calls_dir.mkdir(parents=True, exist_ok=True)


def sampling_params(s: Any, response_length: int) -> dict[str, Any]:
    """What verl's agent-loop worker hands each trajectory (validation: val_kwargs), with eval's settings."""
    params = {
        "temperature": s.temperature,
        "top_p": s.top_p,
        "top_k": s.top_k,
        "repetition_penalty": 1.0,
        "logprobs": False,
    }
    if s.max_tokens != response_length:  # the server grants each turn the response budget unless asked for less
        params["max_tokens"] = s.max_tokens
    return params


def generate(
    verl_cfg: Any,
    tools: AgentTools,
    folder: Path,
    tokenizer: Any,
    rows: list[dict],
    s: Any,
    progress: Callable[[int, int], None] | None = None,
    engine: str = "hf",
    device: str = "cpu",
) -> tuple[list[list[Trajectory]], float]:
    """Every row s.n times through the tool agent loop, all trajectories at once (the server batches their turns):
    trainctl's sampler (engine hf) or vLLM's engine (vllm) behind it. Returns ([[Trajectory] * n] per row, seconds
    spent), the model's loading not counted."""
    import time

    import torch
    from omegaconf import open_dict

    from trainctl.runtime.hf_rollout import HFRolloutServer
    from trainctl.runtime.mcp_bridge import bridge
    from trainctl.runtime.tool_calls import read_call_logs
    from trainctl.silence import library_logs

    write_config(tools)
    rollout = verl_cfg.actor_rollout_ref.rollout
    with open_dict(verl_cfg):
        rollout.multi_turn.tool_config_path = str(tools.config_file)
        verl_cfg.actor_rollout_ref.model.path = str(folder)
        verl_cfg.actor_rollout_ref.model.local_path = str(folder)
    model_type = json.loads((folder / "config.json").read_text()).get("model_type")
    if engine == "vllm":
        from omegaconf import OmegaConf

        from trainctl.inference import vllm

        length = int(rollout.prompt_length) + int(rollout.response_length)
        server = vllm.AgentServer(
            folder,
            device,
            lambda key: OmegaConf.select(verl_cfg, key),
            response_length=int(rollout.response_length),
            max_model_len=length,
        )
    else:
        threads = torch.get_num_threads()
        server = HFRolloutServer(rollout, verl_cfg.actor_rollout_ref.model)
        torch.set_num_threads(threads)  # the server sets the rollout actor's thread count: not this process's
        server.generator.manual_seed(s.seed)
    loop_class = _loop_class()
    tool_list = _load_tools(tools.config_file)
    params = sampling_params(s, int(rollout.response_length))
    total = len(rows) * s.n
    finished = 0

    async def one(row: dict) -> Trajectory:
        nonlocal finished
        loop = loop_class.make(verl_cfg, server, tokenizer, model_type, tool_list)
        output = await loop.run(
            dict(params),
            raw_prompt=list(row["prompt"]),
            extra_info=row.get("extra_info") or {},
            tools_kwargs=(row.get("extra_info") or {}).get("tools_kwargs") or row.get("tools_kwargs") or {},
        )
        finished += 1
        if progress is not None:
            progress(finished, total)
        return _trajectory(loop, output, int(rollout.response_length))

    async def run_all() -> list[Trajectory]:
        return await asyncio.gather(*(one(row) for row in rows for _ in range(s.n)))

    start = time.perf_counter()
    try:
        with library_logs():  # the parser's "Failed to decode tool call" per malformed call: the debug log's
            flat = asyncio.run(run_all())
    finally:
        bridge().shutdown()  # the stdio servers this eval started stop with it
        if engine == "vllm":
            server.shutdown()
    seconds = time.perf_counter() - start
    by_trajectory: dict[str, list[dict]] = {}
    for record in read_call_logs(tools.calls_dir):
        by_trajectory.setdefault(str(record.get("trajectory")), []).append(record)
    for t in flat:
        t.calls = by_trajectory.get(t.request_id, [])
    return [flat[i * s.n : (i + 1) * s.n] for i in range(len(rows))], seconds


def _load_tools(config_file: Path) -> list:
    import contextlib
    import io

    from verl.tools.tool_registry import load_all_tools

    with contextlib.redirect_stdout(io.StringIO()):  # verl's BaseTool prints each schema to stdout
        return load_all_tools(tool_config_path=str(config_file), function_tool_path=None)


_LOOP_CLASS = None


def _loop_class():
    """verl's ToolAgentLoop, keeping each trajectory's state (its messages, for the turns) once it ends."""
    global _LOOP_CLASS
    if _LOOP_CLASS is not None:
        return _LOOP_CLASS
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
    from verl.utils.dataset.rl_dataset import RLHFDataset

    class EvalToolAgentLoop(ToolAgentLoop):
        @classmethod
        def make(cls, cfg, server, tokenizer, model_type, tool_list):
            # the arguments verl's AgentLoopWorker._run_agent_loop instantiates the loop with
            return cls(
                trainer_config=DictConfigWrap(config=cfg),
                server_manager=server,
                tokenizer=tokenizer,
                processor=None,
                dataset_cls=RLHFDataset,
                data_config=DictConfigWrap(cfg.data),
                hf_model_type=model_type,
                tools=ToolListWrap(tool_list),
            )

        async def _handle_pending_state(self, agent_data, sampling_params):
            self.agent_data = agent_data
            return await super()._handle_pending_state(agent_data, sampling_params)

    _LOOP_CLASS = EvalToolAgentLoop
    return _LOOP_CLASS


def _trajectory(loop: Any, output: Any, response_length: int) -> Trajectory:
    from trainctl.runtime.trajectories import turns_of

    data = loop.agent_data
    tokenizer = loop.tokenizer
    special = tuple(getattr(tokenizer, "all_special_tokens", ()) or ())
    last = tokenizer.decode(data.response_ids, skip_special_tokens=True) if data.response_ids else None
    response = [int(t) for t in output.response_ids]
    return Trajectory(
        prompt_ids=[int(t) for t in output.prompt_ids],
        response_ids=response,
        truncated=len(data.response_mask) >= response_length,
        num_turns=int(output.num_turns),
        turns=turns_of(list(data.messages), data.assistant_turns, last, special),
        request_id=str(data.request_id),
    )


def with_turns(extra_info: dict | None, turns: list[dict]) -> dict:
    """A row's extra_info with its trajectory's turns, where a run's reward finds them (trainctl.runtime.trajectories
    hands them to the reward in training): eval scores the whole trajectory as training does."""
    from trainctl.runtime.trajectories import REWARD_KEY

    return {**(extra_info or {}), REWARD_KEY: json.dumps(turns, ensure_ascii=False)}


def refuse_engine(engine: str) -> Problem | None:
    """Agent eval runs verl's tool agent loop on trainctl's sampler (hf) or vLLM's engine (vllm), in this process."""
    if engine in ("hf", "vllm"):
        return None
    return Problem(
        f"agent eval (tools=...) generates with trainctl's sampler or vLLM, not {engine}.",
        key="hardware.rollout_engine",
        hint="add hardware.rollout_engine=vllm, or hf (the CPU sampler; slow for large models)",
    )


def summary(prefix: str, records: list[dict]) -> dict[str, float]:
    """The agent figures of a set of samples: turns, tool calls and errors, per-tool calls (call_metrics, as the
    training log's tool/* figures)."""
    from trainctl.runtime.tool_metrics import call_metrics

    n = len(records)
    if not n:
        return {}
    # a sample's calls do not carry its trajectory's id: number them here, for tool/trajectories_with_calls
    calls = [c | {"trajectory": i} for i, r in enumerate(records) for c in r.get("tool_calls") or []]
    out = {f"{prefix}/turns": sum(r["num_turns"] for r in records) / n}
    figures = call_metrics(calls, n, prefix=f"{prefix}/tool")
    return out | {k: v for k, v in figures.items() if not k.endswith(("/server_restarts",))}


def call_view(record: dict) -> dict:
    """A call as a sample keeps it."""
    return {
        "tool": record.get("tool"),
        "server": record.get("server"),
        "arguments": record.get("arguments"),
        "result": record.get("result"),
        "error": bool(record.get("error")),
        "seconds": record.get("seconds"),
    }
