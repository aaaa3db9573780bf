"""What the model serve and chat tests share: the eval answers to compare with, and a server in this process."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from tests.conftest import invoke
from trainctl.models.tool_warm_start import call_probabilities, probe_rows, render


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


@pytest.fixture(scope="session")
def tool_question(tiny_tools_dir) -> str:
    """The agent recipe's prompt (trainctl.data.tools: a question and the instruction the warm start trained on) for
    the warm start's probe question that tiny-tools is likeliest to call the calculator for. tiny-tools answers some
    questions without the calculator (GRPO's room to learn), and calls greedily for most of its probe questions."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_tools_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_tools_dir)
    rows = probe_rows()
    with torch.no_grad():
        chances = call_probabilities(model, tokenizer, [render(tokenizer, r, 1, True) for r in rows])
    assert chances.max() > 0.5, f"tiny-tools calls for no probe question, greedily: {chances.tolist()}"
    return rows[int(chances.argmax())]["messages"][0]["content"]
