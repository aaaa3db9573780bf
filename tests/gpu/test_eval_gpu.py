"""`trainctl eval` generating with vLLM's offline engine on one CUDA GPU (skipped elsewhere: `make test-gpu`)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.gpu.conftest import cuda, report

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not cuda(), reason="needs a CUDA GPU: run `make test-gpu` there"),
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed (the gpu extra)"),
]


def test_eval_generates_with_vllm_and_scores_with_the_training_reward(cli, gpu_ready, tmp_path):
    from verl.utils.reward_score import default_compute_score

    out = tmp_path / "out"
    result = cli(
        "eval", str(gpu_ready), "hardware=1gpu", "hardware.attn_implementation=sdpa",
        "n=4", "temperature=1.0", "max_tokens=16", "--limit", "32", "--out", str(out),
    )  # fmt: skip
    assert result.exit_code == 0, result.output[-4000:]
    assert "engine vllm" in result.stderr
    assert "pass@4" in result.stdout
    samples = [json.loads(line) for line in (out / "samples" / "arith" / "mid.jsonl").read_text().splitlines()]
    assert len(samples) == 32 * 4
    for s in samples:
        assert s["response_tokens"] <= 16
        assert s["reward"] == default_compute_score("openai/gsm8k", s["response"], s["ground_truth"])
    speed = next(line for line in result.stderr.splitlines() if "tokens/s" in line)
    report("eval-vllm", line=speed.strip())
