"""An RL run's trajectories, step by step, as turns: the prompt, each assistant turn (text and tool calls with their
arguments), each tool result, the reward.

`rollouts/N.jsonl` is verl's rollout dump (trainer.rollout_data_dir): one line per trajectory with the decoded
`input` and `output` texts (special tokens dropped, so a turn starts with a bare `user`/`assistant` line), `score`,
`gts`, `step`. A line may also carry structured turns (`turns` or `messages`: chat messages with roles and
`tool_calls`); those are used as they are. Tool calls in text are the hermes format the tool agent loop parses:
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, results in `<tool_response>` blocks. A tool result that
is an error starts with `Error` (the MCP bridge's and verl's error texts).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

ROLLOUTS = "rollouts"
_ROLE = re.compile(r"(?:^|\n)(system|user|assistant|tool)\n")
_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
_RESPONSE = re.compile(r"<tool_response>\s*(.*?)\s*(?:</tool_response>|$)", re.S)
_ERROR = re.compile(r"^\s*(?:Error\b|error:)")
# at most this many trajectories of one step are parsed per request
MAX_PER_STEP = 2000


@dataclass
class Turn:
    role: str  # system | user | assistant | tool
    text: str = ""
    tool_calls: list[dict] = field(default_factory=list)  # {"name", "arguments", "malformed"?}
    error: bool = False  # a tool result that is an error

    def data(self) -> dict:
        out: dict = {"role": self.role, "text": self.text}
        if self.tool_calls:
            out["tool_calls"] = self.tool_calls
        if self.error:
            out["error"] = True
        return out


def steps(run: Path) -> list[int]:
    folder = Path(run) / ROLLOUTS
    out = []
    for f in folder.glob("*.jsonl") if folder.is_dir() else []:
        if f.stem.isdigit():
            out.append(int(f.stem))
    return sorted(out)


def _split(text: str, first_role: str) -> list[tuple[str, str]]:
    """A decoded conversation into (role, text) turns."""
    parts = _ROLE.split(text)
    out = []
    if parts[0].strip():
        out.append((first_role, parts[0]))
    for i in range(1, len(parts) - 1, 2):
        out.append((parts[i], parts[i + 1]))
    return out


def _calls(text: str) -> tuple[str, list[dict]]:
    calls = []
    for raw in _CALL.findall(text):
        try:
            call = json.loads(raw)
            if not isinstance(call, dict) or "name" not in call:
                raise ValueError
            calls.append({"name": str(call["name"]), "arguments": call.get("arguments", {})})
        except ValueError:
            calls.append({"name": None, "arguments": raw, "malformed": True})
    return _CALL.sub("", text).strip(), calls


def turns_from_text(prompt: str, output: str) -> tuple[list[Turn], list[Turn]]:
    """(prompt turns, response turns) from verl's decoded texts."""
    prompt_turns = [Turn(role, body.strip()) for role, body in _split(prompt, "user") if body.strip()]
    response: list[Turn] = []
    for role, body in _split(output, "assistant"):
        if role == "assistant":
            text, calls = _calls(body)
            response.append(Turn("assistant", text, calls))
            continue
        results = _RESPONSE.findall(body)
        if results:
            for r in results:
                response.append(Turn("tool", r, error=bool(_ERROR.match(r))))
            rest = _RESPONSE.sub("", body).strip()
            if rest:
                response.append(Turn(role, rest))
        elif body.strip():
            response.append(Turn(role, body.strip()))
    return prompt_turns, response


def turns_from_messages(messages: list[dict]) -> tuple[list[Turn], list[Turn]]:
    """(prompt turns, response turns) from structured chat messages: everything up to the first assistant turn is
    the prompt."""
    out: list[Turn] = []
    for m in messages:
        if not isinstance(m, dict):
            continue
        role = str(m.get("role", "?"))
        content = m.get("content", "")
        if isinstance(content, list):  # content parts
            content = "".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
        calls = []
        for c in m.get("tool_calls") or []:
            fn = c.get("function", c) if isinstance(c, dict) else {}
            args = fn.get("arguments", {})
            if isinstance(args, str):
                with contextlib.suppress(ValueError):
                    args = json.loads(args)
            calls.append({"name": fn.get("name"), "arguments": args})
        text = str(content or "")
        if role == "assistant" and not calls and "<tool_call>" in text:
            text, calls = _calls(text)
        error = role == "tool" and (bool(m.get("error")) or bool(_ERROR.match(text)))
        out.append(Turn(role, text.strip(), calls, error))
    first = next((i for i, t in enumerate(out) if t.role == "assistant"), len(out))
    return out[:first], out[first:]


def prompt_key(prompt_turns: list[Turn]) -> str:
    """The same prompt across steps: a hash of its user turns."""
    text = "\n".join(t.text for t in prompt_turns if t.role == "user")
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def trajectory(rec: dict, index: int) -> dict:
    structured = rec.get("turns") if isinstance(rec.get("turns"), list) else rec.get("messages")
    if isinstance(structured, list) and structured:
        prompt, response = turns_from_messages(structured)
    else:
        prompt, response = turns_from_text(str(rec.get("input", "")), str(rec.get("output", "")))
    calls = [c for t in response for c in t.tool_calls]
    errors = sum(t.error for t in response) + sum(bool(c.get("malformed")) for c in calls)
    user = [t.text for t in prompt if t.role == "user"]
    reward = rec.get("score", rec.get("reward"))
    return {
        "index": index,
        "uid": rec.get("uid"),
        "step": rec.get("step"),
        "prompt": user[-1] if user else "",
        "prompt_key": prompt_key(prompt),
        "prompt_turns": [t.data() for t in prompt],
        "turns": [t.data() for t in response],
        "reward": reward if isinstance(reward, int | float) else None,
        "ground_truth": rec.get("gts", rec.get("ground_truth")),
        "tool_calls": len(calls),
        "tool_errors": errors,
    }


def read_step(run: Path, step: int) -> list[dict]:
    path = Path(run) / ROLLOUTS / f"{step}.jsonl"
    out = []
    if not path.is_file():
        return out
    with open(path, encoding="utf-8", errors="replace") as handle:
        for i, line in enumerate(handle):
            if i >= MAX_PER_STEP:
                break
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a line cut mid-write
            if isinstance(rec, dict):
                out.append(trajectory(rec, i))
    return out


def select(
    items: list[dict],
    min_reward: float | None = None,
    max_reward: float | None = None,
    errors: str | None = None,
    prompt: str | None = None,
) -> list[dict]:
    """Filter by reward (a range), by tool errors (`only`: with errors, `none`: without) and by prompt key."""
    out = []
    for t in items:
        r = t["reward"]
        if min_reward is not None and (r is None or r < min_reward):
            continue
        if max_reward is not None and (r is None or r > max_reward):
            continue
        if errors == "only" and not t["tool_errors"]:
            continue
        if errors == "none" and t["tool_errors"]:
            continue
        if prompt and t["prompt_key"] != prompt:
            continue
        out.append(t)
    return out


def step_summary(run: Path) -> list[dict]:
    """Per step: how many trajectories, the mean reward, tool calls and errors."""
    out = []
    for s in steps(run):
        items = read_step(run, s)
        rewards = [t["reward"] for t in items if t["reward"] is not None]
        out.append(
            {
                "step": s,
                "trajectories": len(items),
                "mean_reward": sum(rewards) / len(rewards) if rewards else None,
                "tool_calls": sum(t["tool_calls"] for t in items),
                "with_errors": sum(1 for t in items if t["tool_errors"]),
            }
        )
    return out
