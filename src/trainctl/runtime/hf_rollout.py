"""`rollout.name=hf`: a rollout for verl 0.9.1 that samples with transformers, so the PPO family runs on CPU.

verl's rollouts are servers (vLLM, SGLang, TensorRT-LLM) that its agent loop calls token-in, token-out. This is
the same contract with a transformers model inside a Ray actor:
  - HFReplica (registered with RolloutReplicaRegistry as "hf") starts one HFRolloutServer actor per replica;
  - HFRolloutServer.generate(prompt_ids, sampling_params, request_id) samples a response with the current weights
    (temperature, top-k, top-p, n via the agent loop, max tokens, stop at EOS) and returns verl's TokenOutput with
    the log-probability of every sampled token;
  - HFServerAdapter (the worker-side BaseRollout, in verl's _ROLLOUT_REGISTRY as ("hf", "async")) receives the
    actor's weights after every policy update (verl's `naive` checkpoint engine) and ships them to its server.
Sleep, wake-up and KV-cache calls are no-ops: there is no accelerator memory to give back.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from typing import Any

import ray
import torch

logger = logging.getLogger(__name__)

NAME = "hf"


def server_name(replica_rank: int) -> str:
    return f"{NAME}_server_{replica_rank}_0"


def _filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    if top_k and top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[..., -1, None]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and 0 < top_p < 1:
        sorted_logits, order = torch.sort(logits, descending=True)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        drop = cum - sorted_logits.softmax(-1) > top_p  # keep the smallest set reaching top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
    return logits


def sample(
    model,
    prompt_ids: list[int],
    max_tokens: int,
    eos_ids: set[int],
    temperature: float = 1.0,
    top_k: int = -1,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> tuple[list[int], list[float], str]:
    """Sample one response token by token with a KV cache. Log-probs are of the raw logits (vLLM's default
    `raw_logprobs`): what the policy assigns to each sampled token, before temperature and filtering."""
    ids = torch.tensor([prompt_ids], dtype=torch.long)
    out_ids: list[int] = []
    logps: list[float] = []
    past = None
    stop = "length"
    with torch.inference_mode():
        for _ in range(max_tokens):
            out = model(input_ids=ids, past_key_values=past, use_cache=True)
            past = out.past_key_values
            logits = out.logits[0, -1].float()
            raw = torch.log_softmax(logits, -1)
            if temperature is None or temperature <= 0:
                token = int(torch.argmax(logits))
            else:
                probs = _filter_logits(logits / temperature, top_k, top_p).softmax(-1)
                token = int(torch.multinomial(probs, 1, generator=generator))
            out_ids.append(token)
            logps.append(float(raw[token]))
            if token in eos_ids:
                stop = "completed"
                break
            ids = torch.tensor([[token]], dtype=torch.long)
    return out_ids, logps, stop


class HFRolloutServer:
    """A Ray actor holding a transformers copy of the policy; verl's agent loop calls `generate` on it."""

    def __init__(self, config, model_config, replica_rank: int = 0):
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

        self.config = config
        self.replica_rank = replica_rank
        # the replica hands over the model section as verl's config holds it (a DictConfig, not HFModelConfig)
        get = model_config.get if hasattr(model_config, "get") else lambda k, d=None: getattr(model_config, k, d)
        path = get("local_path", None) or get("path")
        attn = (get("override_config", None) or {}).get("attn_implementation") or "sdpa"
        threads = int(os.environ.get("TRAINCTL_ROLLOUT_THREADS", "1"))
        torch.set_num_threads(max(1, threads))
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation=attn)
        self.model.eval()
        tok = AutoTokenizer.from_pretrained(path)
        eos = set()
        try:
            gen = GenerationConfig.from_pretrained(path)
            eos |= set(gen.eos_token_id if isinstance(gen.eos_token_id, list) else [gen.eos_token_id])
        except OSError:
            pass
        if tok.eos_token_id is not None:
            eos.add(tok.eos_token_id)
        self.eos_ids = {e for e in eos if e is not None}
        self.global_steps: int | None = None
        self.weight_version = 0
        self.lock = asyncio.Lock()
        seed = int(getattr(config, "seed", 0) or 0)
        self.generator = torch.Generator().manual_seed(seed + 1000 * replica_rank)
        self.tokens_generated = 0
        self.seconds = 0.0

    def _max_tokens(self, prompt_len: int, params: dict) -> int:
        limit = self.config.response_length
        budget = self.config.prompt_length + self.config.response_length - prompt_len
        wanted = params.pop("max_tokens", None) or params.pop("max_new_tokens", None) or limit
        return max(1, min(int(wanted), limit, budget))

    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data=None,
        video_data=None,
        audio_data=None,
        mm_processor_kwargs=None,
        priority: int = 0,
        **kwargs,
    ):
        from verl.workers.rollout.replica import TokenOutput

        if image_data or video_data or audio_data:
            raise NotImplementedError("trainctl's hf rollout is text-only")
        params = dict(sampling_params)
        prompt_ids = [int(t) for t in prompt_ids]
        max_tokens = self._max_tokens(len(prompt_ids), params)
        async with self.lock:  # one request at a time: each uses every thread this actor has
            start = time.perf_counter()
            ids, logps, _ = await asyncio.to_thread(
                sample,
                self.model,
                prompt_ids,
                max_tokens,
                self.eos_ids,
                float(params.get("temperature", 1.0)),
                int(params.get("top_k", -1) or -1),
                float(params.get("top_p", 1.0)),
                self.generator,
            )
            self.seconds += time.perf_counter() - start
            self.tokens_generated += len(ids)
        extra = {"global_steps": self.global_steps} if self.global_steps is not None else {}
        return TokenOutput(
            token_ids=ids,
            log_probs=logps if params.get("logprobs") else None,
            stop_reason="completed",  # verl tells finished ("completed") from "aborted"; a length stop is finished
            extra_fields=extra,
        )

    def update_weights(self, state: dict[str, torch.Tensor]) -> int:
        """Load the actor's weights; returns how many tensors were taken (all of the model's, or an error)."""
        own = self.model.state_dict()
        missing = [k for k in own if k not in state and not self._tied(k)]
        unknown = [k for k in state if k not in own]
        if unknown or missing:
            raise RuntimeError(
                f"hf rollout: weights do not match the model: unknown {unknown[:3]}, missing {missing[:3]}"
            )
        self.model.load_state_dict(state, strict=False)
        self.weight_version += 1
        return len(state)

    def _tied(self, key: str) -> bool:
        return key == "lm_head.weight" and bool(getattr(self.model.config, "tie_word_embeddings", False))

    def stats(self) -> dict:
        return {"tokens": self.tokens_generated, "seconds": self.seconds, "weight_version": self.weight_version}

    # --- what verl's replica and checkpoint manager call; nothing to do without accelerator memory ---
    async def wake_up(self, *args, **kwargs):
        return None

    async def sleep(self, *args, **kwargs):
        return None

    async def clear_kv_cache(self, *args, **kwargs):
        return None

    async def release_kv_cache(self, *args, **kwargs):
        return None

    async def resume_kv_cache(self, *args, **kwargs):
        return None

    async def abort_all_requests(self, *args, **kwargs):
        return None

    async def resume_generation(self, *args, **kwargs):
        return None

    async def start_profile(self, *args, **kwargs):
        return None

    async def stop_profile(self, *args, **kwargs):
        return None

    async def set_global_steps(self, global_steps: int):
        self.global_steps = global_steps


@functools.cache
def _replica_class():
    from verl.workers.rollout.replica import RolloutReplica

    class HFReplica(RolloutReplica):
        """One HFRolloutServer per replica, on the node of the replica's first worker; it takes no Ray CPU
        (the training workers hold those) and shares the machine's cores with them."""

        def rollout_worker_use_gpu(self) -> bool:
            return False

        async def launch_servers(self):
            server_cls = ray.remote(HFRolloutServer)
            node_id = None
            if self.workers:
                node_id = await self.workers[0].__ray_call__.remote(
                    lambda self: ray.get_runtime_context().get_node_id()
                )
            options: dict[str, Any] = {
                "name": server_name(self.replica_rank),
                "num_cpus": 0,
                "max_concurrency": self.max_concurrency,
            }
            if node_id is not None:
                options["scheduling_strategy"] = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
                    node_id=node_id, soft=False
                )
            server = server_cls.options(**options).remote(self.config, self.model_config, self.replica_rank)
            self.servers.append(server)
            await server.stats.remote()  # wait until the model is loaded
            self._server_handle = server
            self._server_address = f"hf-rollout-{self.replica_rank}"

    return HFReplica


@functools.cache
def _adapter_class():
    from verl.workers.rollout.base import BaseRollout

    class HFServerAdapter(BaseRollout):
        """The worker side: after each update, the rank that leads a replica ships the actor's full weights to
        that replica's server (every rank drains the generator: each full_tensor() is a collective)."""

        def __init__(self, config, model_config, device_mesh, replica_rank: int = -1):
            super().__init__(config, model_config, device_mesh)
            rank = int(os.environ.get("RANK", "0"))
            world = self.config.tensor_model_parallel_size * self.config.data_parallel_size
            world *= self.config.pipeline_model_parallel_size
            self.replica_rank = rank // world if replica_rank == -1 else replica_rank
            self.leads = rank % world == 0
            self.server = None

        def _server(self):
            if self.server is None:
                self.server = ray.get_actor(server_name(self.replica_rank))
            return self.server

        async def resume(self, tags: list[str]):
            return None

        async def release(self):
            return None

        @torch.no_grad()
        async def update_weights(self, weights, global_steps: int | None = None, wire_format="named_tensors", **kw):
            if wire_format != "named_tensors":
                raise NotImplementedError(f"hf rollout takes full tensors, not {wire_format!r}")
            if kw.get("peft_config") is not None:
                raise NotImplementedError("hf rollout: LoRA weight sync is not supported; use full fine-tuning")
            state = {}
            for name, tensor in weights:
                if hasattr(tensor, "full_tensor"):
                    tensor = tensor.full_tensor()
                if self.leads:
                    state[name] = tensor.detach().to("cpu", copy=True)
            if self.leads:
                await self._server().update_weights.remote(state)
                if global_steps is not None:
                    await self._server().set_global_steps.remote(global_steps)

        def generate_sequences(self, prompts):
            raise NotImplementedError("the hf rollout is a server: verl's agent loop calls it")

    return HFServerAdapter


def __getattr__(name: str):
    # verl imports the adapter by dotted path from _ROLLOUT_REGISTRY; build the class on first use
    if name == "HFServerAdapter":
        return _adapter_class()
    if name == "HFReplica":
        return _replica_class()
    raise AttributeError(name)


def register() -> None:
    """Make `rollout.name=hf` known to verl in this process (idempotent)."""
    from verl.workers.rollout import base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    RolloutReplicaRegistry.register(NAME, _replica_class)
    base._ROLLOUT_REGISTRY[(NAME, "async")] = f"{__name__}.HFServerAdapter"
