"""Trajectories as turns in the run's rollout dumps (rollouts/N.jsonl), beside verl's flattened text.

verl 0.9.1 dumps each step's trajectories (trainer.rollout_data_dir) as the prompt and the response decoded to flat
strings (`input`, `output`, with `score`, `gts`, `step` and the sample key `uid`): the roles, the tool calls and
their results are gone. Its tool agent loop holds them while a trajectory runs (AgentData.messages). Two hooks
(the wrappers here; trainctl.runtime.verl_patches applies them, pinned to verl 0.9.1, when a process imports the
module):

  worker  ToolAgentLoop (verl.experimental.agent_loop.tool_agent_loop): when a trajectory ends, its messages
          (user, assistant turns with their tool calls, tool results) are appended to
          <rollout_data_dir>/turns/<step>-<pid>.jsonl, keyed by the sample key verl's dump uses
          ({uid}_{session}_{index}); a turn the loop generated but did not append (it stopped at a budget) is added
          from its tokens. The same turns ride to the trajectory's reward: extra_info["trainctl_turns"] (JSON).
  trainer PPOTrainer._write_generations (verl.trainer.ppo.v1.trainer_base): once verl has written N.jsonl, each
          line gets `turns` (a list of {role, content, tool_calls?}) from those records; verl's own fields stay as
          they are (`trainctl runs rollouts` and the serve platform read both).

trainctl's verl plugin applies both for runs with tools (TRAINCTL_TOOL_CALLS set): verl_patches.apply_trajectories().
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

TURNS_DIR = "turns"  # under the rollout dump folder
# a trajectory's turns (JSON) in its reward function's extra_info (trainctl.runtime.rewards.verifiers reads them)
REWARD_KEY = "trainctl_turns"
# a record is looked for in the turn files of its step and of the steps just before (a trajectory generated for one
# step can be dumped with the next, off-policy)
STEPS_BACK = 2

_LOCK = threading.Lock()


# -- what a turn is ----------------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """JSON-safe: numpy arrays and scalars as lists and numbers, anything else as text."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist"):
        return _plain(value.tolist())
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def _arguments(text: Any) -> Any:
    if isinstance(text, str):
        with contextlib.suppress(ValueError):
            return json.loads(text)
    return text


def turn(message: dict, special: tuple[str, ...] = ()) -> dict:
    """One message as a turn: role, content (without the tokenizer's special tokens the parser left in), and for an
    assistant turn its tool calls as {name, arguments} with the arguments parsed when they are JSON."""
    content = message.get("content")
    if isinstance(content, list):  # multimodal parts: their text
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    content = "" if content is None else str(content)
    for token in special:
        content = content.replace(token, "")
    out: dict[str, Any] = {"role": str(message.get("role")), "content": content.strip()}
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        calls.append({"name": function.get("name"), "arguments": _arguments(function.get("arguments"))})
    if calls:
        out["tool_calls"] = calls
    return out


def turns_of(messages: list[dict], assistant_turns: int, last_response: str | None, special: tuple = ()) -> list[dict]:
    """A trajectory's turns from the loop's messages; the loop's last generated turn is added when the loop stopped
    (at a budget) before appending it."""
    out = [turn(_plain(m), special) for m in messages]
    appended = sum(1 for t in out if t["role"] == "assistant")
    if last_response is not None and appended < assistant_turns:
        out.append({"role": "assistant", "content": last_response.strip()})
    return out


# -- the worker: write each trajectory's turns ---------------------------------------------------------------------


def _turns_folder(config: Any) -> Path | None:
    try:
        folder = config.trainer.get("rollout_data_dir")
    except AttributeError:
        return None
    return Path(str(folder)) / TURNS_DIR if folder else None


def write_record(folder: Path, step: Any, record: dict) -> None:
    """Append one trajectory's record to this process's file for its step (a failure to write never stops a run)."""
    line = json.dumps(record, ensure_ascii=False, default=str) + "\n"
    with contextlib.suppress(OSError), _LOCK:
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f"{step}-{os.getpid()}.jsonl", "a", encoding="utf-8") as f:
            f.write(line)


def wrap_pending_state(pending):
    """ToolAgentLoop._handle_pending_state, keeping the trajectory's state for run() to read."""

    async def _handle_pending_state(self, agent_data, sampling_params):
        self._trainctl_agent_data = agent_data  # one loop object per trajectory: its state, for run() to read
        return await pending(self, agent_data, sampling_params)

    return _handle_pending_state


def wrap_run(run):
    """ToolAgentLoop.run, writing the trajectory's turns once it ends, and handing them to its reward."""

    async def run_and_record(self, sampling_params, **kwargs):
        output = await run(self, sampling_params, **kwargs)
        try:
            turns = _turns(self)
            if turns is not None:
                # verl scores the trajectory after run() returns, and its reward managers add the trajectory's extra
                # fields to the reward function's extra_info: the whole trajectory reaches the reward
                output.extra_fields[REWARD_KEY] = json.dumps(turns, ensure_ascii=False)
                _record(self, kwargs, turns)
        except Exception as e:  # a record only: never the trajectory's failure
            logger.warning("trainctl: no turns recorded for a trajectory: %s", e)
        return output

    return run_and_record


def _turns(loop: Any) -> list[dict] | None:
    data = getattr(loop, "_trainctl_agent_data", None)
    if data is None:
        return None
    tokenizer = loop.tokenizer
    special = tuple(getattr(tokenizer, "all_special_tokens", ()) or ())
    last = tokenizer.decode(data.response_ids, skip_special_tokens=True) if data.response_ids else None
    return turns_of(list(data.messages), data.assistant_turns, last, special)


def _record(loop: Any, kwargs: dict, turns: list[dict]) -> None:
    data = loop._trainctl_agent_data
    folder = _turns_folder(loop.config)
    if folder is None or "uid" not in kwargs:
        return
    step = _plain(kwargs.get("global_steps"))
    record = {
        "key": f"{kwargs['uid']}_{kwargs.get('session_id', 0)}_0",
        "step": step,
        "request_id": data.request_id,  # the call log's `trajectory`
        "turns": turns,
    }
    write_record(folder, step, record)


# -- the trainer: add the turns to verl's dump --------------------------------------------------------------------


def read_records(folder: Path, step: int) -> dict[str, dict]:
    """The turn records of `step` and the steps just before, by sample key."""
    found: dict[str, dict] = {}
    for back in range(STEPS_BACK, -1, -1):
        for path in sorted(folder.glob(f"{step - back}-*.jsonl")):
            with contextlib.suppress(OSError):
                for line in path.read_text(encoding="utf-8").splitlines():
                    with contextlib.suppress(ValueError):
                        record = json.loads(line)
                        found[record["key"]] = record
    return found


def add_turns(dump: Path, folder: Path, step: int) -> int:
    """Add `turns` (and `request_id`) to each line of verl's dump file from the turn records; returns how many
    lines got them. The file is rewritten whole (a temporary file, renamed)."""
    records = read_records(folder, step)
    if not records or not dump.is_file():
        return 0
    lines, joined = [], 0
    for line in dump.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            lines.append(line)
            continue
        record = records.get(str(row.get("uid")))
        if record is not None:
            row["turns"] = record["turns"]
            row["request_id"] = record.get("request_id")
            joined += 1
        lines.append(json.dumps(row, ensure_ascii=False))
    tmp = dump.with_name(dump.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tmp.replace(dump)
    return joined


def wrap_write_generations(write):
    """PPOTrainer._write_generations (a staticmethod), adding the turns to the dump verl has just written."""

    def _write_generations(inputs, outputs, gts, scores, reward_extra_infos_dict, dump_path, global_steps):
        write(inputs, outputs, gts, scores, reward_extra_infos_dict, dump_path, global_steps)
        try:
            # training dumps and validation dumps alike; the records live with the training dumps
            folder = Path(os.environ.get(ENV_ROLLOUTS) or dump_path) / TURNS_DIR
            add_turns(Path(dump_path) / f"{global_steps}.jsonl", folder, int(global_steps))
        except Exception as e:  # verl's dump stays as verl wrote it
            logger.warning("trainctl: no turns added to the dump of step %s: %s", global_steps, e)

    return staticmethod(_write_generations)


# where the worker hook writes its records (the run's rollout folder), for the validation dumps of another folder
ENV_ROLLOUTS = "TRAINCTL_ROLLOUTS"
