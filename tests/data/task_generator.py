"""An OpenAI-compatible task generator on 127.0.0.1 for `trainctl data gen-tasks` tests: /v1/chat/completions answers
each request with the next of a script of answers (valid task lists, duplicates, near-duplicates, garbage, JSON in
a fence, entries that are not tasks, an HTTP error), and records what it was asked (the prompt, the headers)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field

from tests.openai_server import ChatCompletionsServer

GARBAGE = "Sure! Here are some great tasks for you to consider, in no particular format."


def tasks(*items: tuple[str, int, list[str], str | None]) -> str:
    return json.dumps({"tasks": [{"task": t, "difficulty": d, "tools": tl, "answer": a} for t, d, tl, a in items]})


# the answers, request by request (then the script starts over)
SCRIPT: list[tuple[int, str]] = [
    (
        200,
        tasks(
            ("What is 17 * 23? Use the calculator.", 1, ["calculator"], "391"),
            ("Compute (12 + 30) / 7 with the calculator.", 2, ["calculator"], "6"),
            ("What is 17 * 23? Use the calculator.", 1, ["calculator"], "391"),  # a duplicate in the same answer
            ("Add 1234 and 4321, then subtract 55.", 3, ["calculator", "search"], None),  # search: no such tool
        ),
    ),
    (200, GARBAGE),
    (
        200,
        "```json\n"
        + tasks(
            ("what is 17*23?  use the calculator!", 1, ["calculator"], "391"),  # the first one, normalised
            ("What is 17 * 23? Use the calculator tool.", 1, ["calculator"], "391"),  # near-duplicate of the first
            (
                "A shop sells 3 pens at 1.25 each and 2 books at 7.5 each: what is the total?",
                4,
                ["calculator"],
                "18.75",
            ),
        )
        + "\n```",
    ),
    (500, "the generator is overloaded"),
    (
        200,
        json.dumps(
            {
                "tasks": [
                    {"task": "", "difficulty": 2, "tools": [], "answer": None},  # no text
                    {
                        "task": "Divide 144 by 12 and square the result.",
                        "difficulty": 9,
                        "tools": [],
                        "answer": "144",
                    },  # 9
                    {
                        "task": "How many seconds are in 3 days? Compute it.",
                        "difficulty": 2,
                        "tools": ["calculator"],
                        "answer": None,
                    },
                    "not a task at all",
                ]
            }
        ),
    ),
    (
        200,
        tasks(
            ("Multiply 99 by 101 using the calculator.", 2, ["calculator"], "9999"),
            ("What is 2 to the power of 10, minus 24?", 3, ["calculator"], "1000"),
            ("Estimate 15% of 240 with the calculator.", 2, ["calculator"], "36"),
        ),
    ),
]


@dataclass
class TaskGenerator(ChatCompletionsServer):
    script: list[tuple[int, str]] = field(default_factory=lambda: list(SCRIPT))
    requests: list[dict] = field(default_factory=list)  # {"body", "authorization"}

    def __post_init__(self) -> None:
        self.lock = threading.Lock()
        super().__init__()

    def reply(self, body: dict, headers) -> tuple[int, str]:
        with self.lock:
            i = len(self.requests)
            self.requests.append({"body": body, "authorization": headers.get("Authorization")})
            return self.script[i % len(self.script)]
