"""`trainctl model serve` on GPU hardware: vLLM's own OpenAI server (`python -m vllm.entrypoints.openai.api_server`)
on the merged model folder, configured from the run's config.

UNTESTED here: the machines this was written on have no GPU. tests/gpu/test_model_serve_gpu.py runs it where one is.

What trainctl sets: the served name; tensor parallelism and GPU memory share from the rollout's settings; the
validation sampling settings as vLLM's defaults (`--generation-config vllm --override-generation-config`); tool calls
parsed with vLLM's parser of the same format the run's tool loop used (verl's `hermes` is vLLM's `hermes`); the token
through the environment (VLLM_API_KEY), never on the command line, where `ps` would show it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

from trainctl.errors import TrainctlError
from trainctl.inference.model import Served

# verl's tool-call parser names (multi_turn.format) -> vLLM's --tool-call-parser names, where vLLM has the same format
PARSERS = {"hermes": "hermes", "qwen3_coder": "qwen3_coder", "gpt-oss": "openai", "glm": "glm45", "kimi": "kimi_k2"}


def check_installed() -> None:
    if importlib.util.find_spec("vllm") is None:
        raise TrainctlError(
            "serving on GPU hardware needs vLLM, which is not installed here.",
            hint="pip install 'verl[vllm]' on the GPU machine, or serve on the CPU: hardware=cpu",
        )


def command(served: Served, folder, host: str, port: int, max_model_len: int | None = None) -> list[str]:
    """The vLLM server's command line (no secret in it)."""
    s = served.sampling
    generation = {"temperature": s.temperature, "top_p": s.top_p, "top_k": s.top_k, "max_new_tokens": s.max_tokens}
    argv = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(folder),
        "--served-model-name", served.name,
        "--host", host,
        "--port", str(port),
        "--tensor-parallel-size", str(int(served.value("actor_rollout_ref.rollout.tensor_model_parallel_size") or 1)),
        "--gpu-memory-utilization", str(float(served.value("actor_rollout_ref.rollout.gpu_memory_utilization") or 0.9)),
        "--seed", str(s.seed),
        "--generation-config", "vllm",
        "--override-generation-config", json.dumps(generation),
        "--disable-fastapi-docs",  # Swagger UI loads from a CDN
    ]  # fmt: skip
    if max_model_len:
        argv += ["--max-model-len", str(max_model_len)]
    parser = PARSERS.get(served.tool_format)
    if parser:
        argv += ["--enable-auto-tool-choice", "--tool-call-parser", parser]
    if served.chat_template_kwargs:
        argv += ["--default-chat-template-kwargs", json.dumps(served.chat_template_kwargs)]
    return argv


def run(served: Served, folder, host: str, port: int, token: str | None) -> int:
    """Run vLLM's server in the foreground until it exits (Ctrl-C stops it); returns its exit code."""
    import signal
    import subprocess

    env = dict(os.environ)
    env.pop("VLLM_API_KEY", None)
    if token:
        env["VLLM_API_KEY"] = token  # vLLM's server reads its --api-key default from here
    proc = subprocess.Popen(command(served, folder, host, port), env=env)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        try:
            return proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()
