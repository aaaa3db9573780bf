"""The shapes users' data comes in, detected from its columns, and one example type they all become.

messages          {"messages": [{"role", "content"}, ...]}
sharegpt          {"conversations": [{"from", "value"}, ...]}
preference        {"prompt", "chosen", "rejected"}          (strings or message lists)
alpaca            {"instruction", "input"?, "output"}
question_answer   {"question", "answer"}
prompt_response   {"prompt", "response"} or {"prompt", "completion"}
unpaired          {"prompt", "completion", "label"}           (KTO's: label true for a desirable answer)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from trainctl.data.readers import DataError

# shape -> its columns (role -> default column name); required roles first, optional ones marked with ?
SHAPES: dict[str, dict[str, str]] = {
    "messages": {"messages": "messages"},
    "sharegpt": {"conversations": "conversations"},
    "preference": {"prompt": "prompt", "chosen": "chosen", "rejected": "rejected"},
    "alpaca": {"instruction": "instruction", "output": "output", "input?": "input"},
    "question_answer": {"question": "question", "answer": "answer"},
    "prompt_response": {"prompt": "prompt", "response": "response"},
    "prompt_completion": {"prompt": "prompt", "response": "completion"},
    "unpaired": {"prompt": "prompt", "completion": "completion", "label": "label"},
}
# the flags that name columns, and the shape they imply
FLAGS = {
    "messages_col": "--messages-col",
    "prompt_col": "--prompt-col",
    "response_col": "--response-col",
    "chosen_col": "--chosen-col",
    "rejected_col": "--rejected-col",
}
_SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "model": "assistant",
    "bot": "assistant",
    "system": "system",
    "tool": "tool",
    "function": "tool",
}
ROLES = ("system", "user", "assistant", "tool")


@dataclass
class Shape:
    name: str
    columns: dict[str, str]  # role -> column in this file

    def describe(self) -> str:
        return f"{self.name} (" + ", ".join(f"{role}={col}" for role, col in self.columns.items()) + ")"


@dataclass(slots=True)
class Example:
    """One example, whatever it came as."""

    prompt: list[dict]  # messages up to the response
    response: str | None = None
    chosen: list[dict] | None = None
    rejected: list[dict] | None = None


class Skip(Exception):
    """A row that cannot become an example; its message is the reason it is dropped."""


def _flags_hint() -> str:
    return (
        "name the columns: --prompt-col and --response-col, or --messages-col, or --prompt-col --chosen-col "
        "--rejected-col"
    )


def detect(columns: set[str], mapping: dict[str, str | None] | None = None) -> Shape:
    """The shape of a file with these columns; mapping flags (prompt_col=...) decide when given."""
    mapping = {k: v for k, v in (mapping or {}).items() if v}
    if mapping:
        missing = [f"{FLAGS[k]} {v}" for k, v in mapping.items() if v not in columns]
        if missing:
            raise DataError(
                f"no such column: {', '.join(missing)}.", details=[f"columns: {', '.join(sorted(columns))}"]
            )
        if "messages_col" in mapping:
            return Shape("messages", {"messages": mapping["messages_col"]})
        if "chosen_col" in mapping or "rejected_col" in mapping:
            cols = {
                "prompt": mapping.get("prompt_col", "prompt"),
                "chosen": mapping.get("chosen_col", "chosen"),
                "rejected": mapping.get("rejected_col", "rejected"),
            }
            _require(cols, columns)
            return Shape("preference", cols)
        cols = {"prompt": mapping.get("prompt_col", "prompt"), "response": mapping.get("response_col", "response")}
        _require(cols, columns)
        return Shape("prompt_response", cols)

    matches = []
    for name, cols in SHAPES.items():
        required = {role: col for role, col in cols.items() if not role.endswith("?")}
        if set(required.values()) <= columns:
            present = {role.rstrip("?"): col for role, col in cols.items() if col in columns}
            matches.append(Shape(name, present))
    # a preference or unpaired file also has prompt (and completion): prefer the fuller match
    if any(m.name in ("preference", "unpaired") for m in matches):
        matches = [m for m in matches if m.name not in ("prompt_response", "prompt_completion")]
    if len(matches) == 1:
        return matches[0]
    seen = ", ".join(sorted(columns)) or "(none)"
    if not matches:
        raise DataError(f"cannot tell what these rows are: columns {seen}.", hint=_flags_hint())
    raise DataError(
        f"ambiguous rows: they could be {' or '.join(m.describe() for m in matches)}.",
        details=[f"columns: {seen}"],
        hint=_flags_hint(),
    )


def _require(cols: dict[str, str], columns: set[str]) -> None:
    missing = [c for c in cols.values() if c not in columns]
    if missing:
        raise DataError(
            f"no column {', '.join(repr(c) for c in missing)} in these rows (columns: {', '.join(sorted(columns))}).",
            hint=_flags_hint(),
        )


def _text(value: Any, what: str) -> str:
    if value is None or (isinstance(value, str) and not value.strip()):
        raise Skip(f"empty {what}")
    if not isinstance(value, str):
        raise Skip(f"{what} is a {type(value).__name__}, not text")
    return value


def _messages(value: Any, what: str) -> list[dict]:
    if not isinstance(value, list) or not value:
        raise Skip(f"{what} is not a list of messages")
    out = []
    for m in value:
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise Skip(f"{what} has a message without a known role and text content")
        out.append({"role": m["role"], "content": m["content"]})
    return out


def _turns(value: Any, what: str, role: str) -> list[dict]:
    """Messages, or a plain string as one message of `role`."""
    if isinstance(value, str):
        return [{"role": role, "content": _text(value, what)}]
    return _messages(value, what)


def _from_messages(c: dict, row: dict) -> Example:
    msgs = _messages(row.get(c["messages"]), "messages")
    if msgs[-1]["role"] != "assistant":
        return Example(msgs)
    return Example(msgs[:-1], msgs[-1]["content"])


def _from_sharegpt(c: dict, row: dict) -> Example:
    raw = row.get(c["conversations"])
    if not isinstance(raw, list):
        raise Skip("conversations is not a list")
    msgs = []
    for turn in raw:
        if not isinstance(turn, dict) or turn.get("from") not in _SHAREGPT_ROLES:
            raise Skip("a conversation turn without a known 'from'")
        msgs.append({"role": _SHAREGPT_ROLES[turn["from"]], "content": _text(turn.get("value"), "turn")})
    if not msgs:
        raise Skip("conversations is not a list of messages")
    if msgs[-1]["role"] != "assistant":
        return Example(msgs)
    return Example(msgs[:-1], msgs[-1]["content"])


def _from_preference(c: dict, row: dict) -> Example:
    chosen = _turns(row.get(c["chosen"]), "chosen", "assistant")
    rejected = _turns(row.get(c["rejected"]), "rejected", "assistant")
    prompt = _turns(row.get(c["prompt"]), "prompt", "user")
    return _split_pair(prompt, chosen, rejected)


def _from_unpaired(c: dict, row: dict) -> Example:
    """A labelled answer: a desirable one as chosen, an undesirable one as rejected (the other side stays empty)."""
    prompt = _turns(row.get(c["prompt"]), "prompt", "user")
    completion = _turns(row.get(c["completion"]), "completion", "assistant")
    label = row.get(c["label"])
    if isinstance(label, str) and label.strip().lower() in ("true", "false", "1", "0"):
        label = label.strip().lower() in ("true", "1")
    if not isinstance(label, bool | int) or label not in (True, False, 0, 1):
        raise Skip("label is not true or false")
    if completion[-1]["role"] != "assistant":
        raise Skip("completion does not end with an assistant message")
    return Example(prompt, chosen=completion) if label else Example(prompt, rejected=completion)


def _from_alpaca(c: dict, row: dict) -> Example:
    text = _text(row.get(c["instruction"]), "instruction")
    extra = row.get(c.get("input", "input"))
    if isinstance(extra, str) and extra.strip():
        text = f"{text}\n\n{extra}"
    return Example([{"role": "user", "content": text}], _text(row.get(c["output"]), "output"))


def _from_question_answer(c: dict, row: dict) -> Example:
    question = _text(row.get(c["question"]), "question")
    return Example([{"role": "user", "content": question}], _text(row.get(c["answer"]), "answer"))


def _from_prompt_response(c: dict, row: dict) -> Example:
    prompt = _turns(row.get(c["prompt"]), "prompt", "user")
    return Example(prompt, _text(row.get(c["response"]), "response"))


_EXAMPLE = {
    "messages": _from_messages,
    "sharegpt": _from_sharegpt,
    "preference": _from_preference,
    "alpaca": _from_alpaca,
    "question_answer": _from_question_answer,
    "prompt_response": _from_prompt_response,
    "prompt_completion": _from_prompt_response,
    "unpaired": _from_unpaired,
}


def example(shape: Shape, row: dict) -> Example:
    """The row as an Example; Skip (with the reason) when it cannot be one."""
    return _EXAMPLE[shape.name](shape.columns, row)


def _split_pair(prompt: list[dict], chosen: list[dict], rejected: list[dict]) -> Example:
    """Chosen and rejected hold only what differs: a repeated prompt, or shared earlier turns, move to the prompt."""
    for side in (chosen, rejected):
        if side[: len(prompt)] == prompt and len(side) > len(prompt):
            del side[: len(prompt)]
    shared = 0
    while shared < min(len(chosen), len(rejected)) - 1 and chosen[shared] == rejected[shared]:
        shared += 1
    prompt = [*prompt, *chosen[:shared]]
    chosen, rejected = chosen[shared:], rejected[shared:]
    if chosen[-1]["role"] != "assistant" or rejected[-1]["role"] != "assistant":
        raise Skip("chosen or rejected does not end with an assistant message")
    if chosen == rejected:
        raise Skip("chosen and rejected are the same")
    return Example(prompt=prompt, chosen=chosen, rejected=rejected)


# -- ground truths ------------------------------------------------------------------------------------------------

_HASH_ANSWER = re.compile(r"####\s*(.+?)\s*$", re.S)
_NUMBER = re.compile(r"-?[\d,]*\.?\d+")


def last_boxed(text: str) -> str | None:
    r"""The content of the last \boxed{...} (balanced braces), as verl's math scorer reads it."""
    start = text.rfind("\\boxed")
    if start < 0:
        return None
    i = text.find("{", start)
    if i < 0:
        return None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j].strip() or None
    return None


def ground_truth(answer: str) -> str | None:
    """The checkable answer in a worked solution: after `####` (gsm8k), else the last \\boxed{}, else all of it."""
    m = _HASH_ANSWER.search(answer)
    if m:
        value = m.group(1).strip()
        return value.replace(",", "") if _NUMBER.fullmatch(value) else value
    boxed = last_boxed(answer)
    if boxed:
        return boxed
    return answer.strip() or None
