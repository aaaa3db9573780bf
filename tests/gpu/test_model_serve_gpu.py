"""`trainctl model serve` with GPU hardware: vLLM's OpenAI server on one CUDA GPU, started and configured by trainctl
(skipped elsewhere: `make test-gpu`). Written without a GPU to run it on: not yet run."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.gpu.conftest import cuda, report

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not cuda(), reason="needs a CUDA GPU: run `make test-gpu` there"),
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed (the gpu extra)"),
]


def test_vllm_serves_the_model_with_the_runs_defaults_behind_a_token(gpu_ready):
    from openai import AuthenticationError, OpenAI

    from trainctl.inference.server import free_port

    port, token = free_port(), "tok-gpu-test-0123456789"
    argv = [sys.executable, "-m", "trainctl", "model", "serve", str(gpu_ready), "hardware=1gpu", "--port", str(port),
            "--token-env", "SERVE_TOKEN", "hardware.attn_implementation=sdpa"]  # fmt: skip
    proc = subprocess.Popen(
        argv, env={**os.environ, "SERVE_TOKEN": token}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=token)
    started = time.monotonic()
    try:
        while True:
            assert proc.poll() is None, proc.stdout.read()[-4000:]
            assert time.monotonic() - started < 600, "vLLM's server did not answer within 10 minutes"
            try:
                models = [m.id for m in client.models.list()]
                break
            except Exception:
                time.sleep(2)
        assert models == [gpu_ready.name]
        question = [{"role": "user", "content": "What is 12 + 30?"}]
        a = client.chat.completions.create(model=gpu_ready.name, messages=question)
        b = client.chat.completions.create(model=gpu_ready.name, messages=question)
        assert a.choices[0].message.content == b.choices[0].message.content  # greedy: val_kwargs' temperature 0
        assert a.usage.completion_tokens <= 64  # data.max_response_length, the default max_tokens
        with pytest.raises(AuthenticationError):
            OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="wrong").models.list()
        report("model-serve-vllm", start_s=round(time.monotonic() - started, 1))
    finally:
        proc.send_signal(signal.SIGINT)
        output = proc.communicate(timeout=60)[0]
    assert token not in output
    assert re.search(r"Serving .* with vLLM's OpenAI server", output)
