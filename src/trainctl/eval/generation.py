"""Generating responses for eval: on the CPU with trainctl's batched sampler (the one the `hf` rollout serves training
with), on a GPU with vLLM's offline `LLM`. Both take prompt token ids and return, per request, the response token ids
and whether it stopped at the length limit."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainctl.errors import TrainctlError
from trainctl.eval.settings import Sampling


@dataclass
class Generated:
    token_ids: list[int]
    truncated: bool  # stopped by max_tokens, not by an EOS or stop token


def max_tokens_for(prompt_len: int, wanted: int, prompt_length: int, response_length: int) -> int:
    """What the `hf` rollout grants a request (HFRolloutServer._max_tokens): the asked-for tokens, at most the
    response length, and no more than the prompt + response budget leaves."""
    return max(1, min(int(wanted), response_length, prompt_length + response_length - prompt_len))


def generate_cpu(
    folder: Path,
    prompts: list[list[int]],
    max_tokens: list[int],
    s: Sampling,
    *,
    attn_implementation: str = "sdpa",
    max_batch_size: int = 256,
    max_prefill_tokens: int = 8192,
    progress: Callable[[int, int], None] | None = None,
):
    """Every prompt s.n times, sampled as one continuous batch. Returns ([[Generated] * n] per prompt, seconds spent
    generating (the model's loading not counted))."""
    import time

    import torch

    from trainctl.runtime.sampler import SamplingParams, generate, load_policy

    model, tok, eos_ids = load_policy(str(folder), attn_implementation)
    requests, params = [], []
    for prompt, limit in zip(prompts, max_tokens, strict=True):
        p = SamplingParams(max_tokens=limit, temperature=s.temperature, top_k=s.top_k, top_p=s.top_p)
        for _ in range(s.n):
            requests.append(prompt)
            params.append(p)
    total = len(requests)

    def on_step(sampler) -> None:
        if progress is not None:
            progress(total - len(sampler.waiting) - len(sampler.rows), total)

    start = time.perf_counter()
    completions = generate(
        model,
        requests,
        params,
        eos_ids,
        generator=torch.Generator().manual_seed(s.seed),
        tokenizer=tok,
        max_batch_size=max_batch_size,
        max_prefill_tokens=max_prefill_tokens,
        pad_id=tok.pad_token_id or 0,
        on_step=on_step,
    )
    seconds = time.perf_counter() - start
    out = [Generated(c.token_ids, c.finish_reason == "length") for c in completions]
    return [out[i * s.n : (i + 1) * s.n] for i in range(len(prompts))], seconds


def generate_vllm(
    folder: Path,
    prompts: list[list[int]],
    max_tokens: list[int],
    s: Sampling,
    *,
    device: str,
    value: Callable[[str], Any],
    max_model_len: int | None = None,
    progress: Callable[[int, int], None] | None = None,
):
    """vLLM's offline engine (imported here): on GPUs, or on the CPU through vLLM's CPU build, with the engine
    settings `model serve` gives vLLM's server (trainctl.inference.vllm). n samples per request, the same settings.
    Returns what generate_cpu returns."""
    import os

    from trainctl.inference import vllm as vllm_settings

    try:
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt
    except ImportError as e:
        raise TrainctlError(
            f"generating with vLLM needs vLLM ({e}).",
            hint="make install (vLLM's CPU build where there is no CUDA), or pip install 'trainctl[gpu]' on a GPU "
            "machine; or generate with trainctl's sampler: hardware.rollout_engine=hf",
        ) from None
    import time

    os.environ.update(vllm_settings.environment(device, base={}, quiet=True))  # its engine process inherits them
    llm = LLM(model=str(folder), max_model_len=max_model_len, seed=s.seed, **vllm_settings.engine_args(device, value))
    params = [
        SamplingParams(
            n=s.n, temperature=s.temperature, top_p=s.top_p, top_k=s.top_k, max_tokens=limit, seed=s.seed + i
        )
        for i, limit in enumerate(max_tokens)
    ]
    start = time.perf_counter()
    outputs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    if progress is not None:
        progress(len(prompts) * s.n, len(prompts) * s.n)
    seconds = time.perf_counter() - start
    result = [[Generated(list(o.token_ids), o.finish_reason == "length") for o in out.outputs] for out in outputs]
    del llm
    return result, seconds
