"""What the model serve and chat tests share: the eval answers to compare with, and a server in this process."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from tests.conftest import invoke


def eval_samples(model: str, out: Path, limit: int = 2) -> list[dict]:
    """`trainctl eval MODEL --limit N` (greedy, validation's settings): what it wrote for each prompt."""
    result = invoke("eval", model, "--limit", str(limit), "--out", str(out))
    assert result.exit_code == 0, result.output[-4000:]
    (samples,) = (out / "samples" / "arith").glob("*.jsonl")
    return [json.loads(line) for line in samples.read_text().splitlines()]


@contextlib.contextmanager
def served_here(model: str, *words: str, token: str | None = None):
    """`trainctl model serve MODEL` as the command builds it, on 127.0.0.1 and a free port, in this process (the
    imports are paid once per test process): yields the running Server."""
    from trainctl.inference.model import prepare
    from trainctl.inference.server import open_server

    server = open_server(prepare(model, list(words)), "127.0.0.1", 0, token)
    server.start()
    try:
        yield server
    finally:
        server.stop()


# the agent recipe's prompt (trainctl.data.tools): the question and the instruction the warm start trained on
TOOL_QUESTION = 'What is 26 + 38? Use the calculator, then give the final answer after "####".'
