"""Tasks generated from a tool list (`trainctl data gen-tasks`): what a generator model is asked, how its answers are
read (malformed ones counted, never fatal), deduplicated, split and written as RL rows for verl's tool agent loop.

An MCP server alone gives no tasks to train on; ART generates them from the server's tool list with an LLM, and so
does this. The generator sees the tool schemas and returns JSON: {"tasks": [{"task", "difficulty" (1-5), "tools",
"answer" (or null)}]}. A task without an answer is scored by reward=judge (RULER-style: the judge ranks a group's
trajectories, no ground truth needed); with one, the answer is the row's ground truth as well.

Near-duplicates are found with the standard library's difflib (SequenceMatcher on the normalised text): the task
counts run in the hundreds or thousands, where a quadratic pass over short strings, pre-filtered by difflib's own
cheap upper bounds, takes seconds; a MinHash index (datasketch) would add a dependency for no gain at that size.
"""

from __future__ import annotations

import json
import random
import re
import string
from collections import Counter
from dataclasses import dataclass, field
from difflib import SequenceMatcher

DATA_SOURCE = "trainctl/gen-tasks"  # each row's data_source: no verl scorer reads it (reward=judge or fn)
ABILITY = "tools"
TOOL_AGENT = "tool_agent"  # the name verl registers its ToolAgentLoop under
# SequenceMatcher ratio of two normalised tasks with the same numbers at or above which the later one is dropped
NEAR_DUPLICATE = 0.9
DIFFICULTIES = range(1, 6)

PROMPT = """You write tasks for training an AI assistant that can call these tools:

{tools}

Write {k} different tasks a user could ask that need one or more of these tools to answer well. Mix easy and hard
ones, and use every tool across the tasks. For each task give:
- "task": the user's request, self-contained (the assistant sees nothing else)
- "difficulty": 1 (one simple call) to 5 (several calls and reasoning)
- "tools": the names of the tools it needs
- "answer": the correct final answer when it can be known for certain, else null
{avoid}Reply with JSON only: {{"tasks": [{{"task": "...", "difficulty": 2, "tools": ["..."], "answer": null}}]}}"""


@dataclass
class Task:
    task: str
    difficulty: int
    tools: list[str]
    answer: str | None = None


@dataclass
class Parsed:
    tasks: list[Task] = field(default_factory=list)
    malformed_answers: int = 0  # answers with no readable {"tasks": [...]} at all
    malformed_tasks: int = 0  # entries of a readable answer that are not a task (no text, a bad difficulty)


def response_format() -> dict:
    """The JSON schema of an answer (OpenAI structured outputs; vLLM and SGLang guided decoding)."""
    task = {
        "type": "object",
        "properties": {
            "task": {"type": "string"},
            "difficulty": {"type": "integer", "minimum": 1, "maximum": 5},
            "tools": {"type": "array", "items": {"type": "string"}},
            "answer": {"type": ["string", "null"]},
        },
        "required": ["task", "difficulty", "tools", "answer"],
        "additionalProperties": False,
    }
    schema = {
        "type": "object",
        "properties": {"tasks": {"type": "array", "items": task}},
        "required": ["tasks"],
        "additionalProperties": False,
    }
    return {"type": "json_schema", "json_schema": {"name": "tasks", "schema": schema, "strict": True}}


def prompt(schemas: list[dict], k: int, avoid: list[str] | None = None) -> str:
    """The generator's prompt for k tasks; `avoid`: tasks already kept, which it should not repeat."""
    tools = "\n".join(json.dumps(s, ensure_ascii=False) for s in schemas)
    shown = "".join(f"  - {t}\n" for t in (avoid or [])[-12:])
    note = f"Do not repeat these tasks:\n{shown}" if shown else ""
    return PROMPT.format(tools=tools, k=k, avoid=note)


def _json_object(text: str):
    """The first JSON object or list in an answer (bare, in a ```json fence, or among some words)."""
    text = (text or "").strip()
    fence = re.search(r"```(?:json)?\s*(.*?)```", text, re.S)
    candidates = [fence.group(1)] if fence else []
    candidates.append(text)
    decoder = json.JSONDecoder()
    for c in candidates:
        for start in (i for i, ch in enumerate(c) if ch in "{["):
            try:
                return decoder.raw_decode(c[start:])[0]
            except ValueError:
                continue
    return None


def parse(text: str | None, tool_names: list[str]) -> Parsed:
    """The tasks of one answer. Tool names the server does not have are dropped from a task's list."""
    out = Parsed()
    value = _json_object(text or "")
    entries = value.get("tasks") if isinstance(value, dict) else value if isinstance(value, list) else None
    if not isinstance(entries, list):
        out.malformed_answers = 1
        return out
    known = set(tool_names)
    for e in entries:
        task = _task(e, known)
        if task is None:
            out.malformed_tasks += 1
        else:
            out.tasks.append(task)
    return out


def _task(e, known: set[str]) -> Task | None:
    if not isinstance(e, dict) or not isinstance(e.get("task"), str) or not e["task"].strip():
        return None
    try:
        difficulty = int(e.get("difficulty"))
    except (TypeError, ValueError):
        return None
    if difficulty not in DIFFICULTIES:
        return None
    tools = e.get("tools") or []
    tools = [t for t in tools if isinstance(t, str) and t in known] if isinstance(tools, list) else []
    answer = e.get("answer")
    answer = None if answer is None or (isinstance(answer, str) and not answer.strip()) else str(answer).strip()
    return Task(" ".join(e["task"].split()), difficulty, tools, answer)


_NUMBER = re.compile(r"\d+")
_PUNCTUATION = str.maketrans(string.punctuation, " " * len(string.punctuation))


def normalise(text: str) -> str:
    """Lower case, punctuation as spaces, single spaces: "What is 17*23?" and "what is 17 * 23" are one task."""
    return " ".join(text.lower().translate(_PUNCTUATION).split())


class Deduplicator:
    """Keeps a task unless its normalised text equals, or nearly equals, one kept before."""

    def __init__(self, threshold: float = NEAR_DUPLICATE):
        self.threshold = threshold
        self.kept: list[str] = []
        self.exact = 0
        self.near = 0

    def add(self, task: Task) -> bool:
        text = normalise(task.task)
        if text in self.kept:
            self.exact += 1
            return False
        numbers = _NUMBER.findall(text)
        for other in self.kept:
            # the same words with other numbers are another task (another answer): only the wording may differ
            if _NUMBER.findall(other) != numbers:
                continue
            m = SequenceMatcher(None, text, other, autojunk=False)
            # difflib's cheap upper bounds first: most pairs stop there
            near = m.real_quick_ratio() >= self.threshold and m.quick_ratio() >= self.threshold
            if near and m.ratio() >= self.threshold:
                self.near += 1
                return False
        self.kept.append(text)
        return True


def split(tasks: list[Task], test_share: float, seed: int) -> tuple[list[Task], list[Task]]:
    """(train, test), shuffled with `seed`; at least one test task when there are two or more tasks."""
    order = list(tasks)
    random.Random(seed).shuffle(order)
    n_test = round(len(order) * test_share)
    if test_share > 0 and len(order) >= 2:
        n_test = max(1, n_test)
    n_test = min(n_test, max(0, len(order) - 1))
    return order[n_test:], order[:n_test]


def row(task: Task, index: int, split_name: str, instruction: str | None = None) -> dict:
    """One RL row for verl's tool agent loop (RLHFDataset's columns; agent_name picks the tool loop)."""
    content = f"{task.task} {instruction}".strip() if instruction else task.task
    return {
        "data_source": DATA_SOURCE,
        "agent_name": TOOL_AGENT,
        "prompt": [{"role": "user", "content": content}],
        "ability": ABILITY,
        # reward=judge reads the ground truth when there is one (its template's `ground_truth`); else ranks the group
        "reward_model": {"style": "judge" if task.answer is None else "rule", "ground_truth": task.answer or ""},
        "extra_info": {
            "split": split_name,
            "index": index,
            "difficulty": task.difficulty,
            "tools": list(task.tools),
        },
    }


@dataclass
class Report:
    requested: int
    requests: int = 0  # generator requests made
    failed_requests: int = 0  # HTTP errors and timeouts
    malformed_answers: int = 0
    malformed_tasks: int = 0
    exact_duplicates: int = 0
    near_duplicates: int = 0
    kept: int = 0
    train: int = 0
    test: int = 0
    with_answer: int = 0
    difficulty: dict[int, int] = field(default_factory=dict)
    tool_coverage: dict[str, int] = field(default_factory=dict)  # tool -> tasks that name it (0: never)
    seconds: float = 0.0

    def to_json(self) -> dict:
        out = dict(self.__dict__)
        out["difficulty"] = {str(k): v for k, v in sorted(self.difficulty.items())}
        return out


def describe(tasks: list[Task], tool_names: list[str], report: Report) -> None:
    """Fill the report's difficulty histogram and tool coverage from the kept tasks."""
    report.difficulty = dict(sorted(Counter(t.difficulty for t in tasks).items()))
    report.tool_coverage = {name: sum(name in t.tools for t in tasks) for name in tool_names}
    report.with_answer = sum(t.answer is not None for t in tasks)
