"""`rollout.name=hf`: a rollout for verl 0.9.1 that samples with transformers, so the PPO family runs on CPU.

verl's rollouts are servers (vLLM, SGLang, TensorRT-LLM) that its agent loop calls token-in, token-out. This is
the same contract with a transformers model inside a Ray actor:
  - HFReplica (registered with RolloutReplicaRegistry as "hf") starts one HFRolloutServer actor per replica;
  - HFRolloutServer.generate(prompt_ids, sampling_params, request_id) samples a response with the current weights
    (temperature, top-k, top-p, repetition penalty, n via the agent loop, max tokens, stop at EOS, stop token ids,
    stop strings) and returns verl's TokenOutput with the log-probability of every sampled token; requests that
    arrive together are sampled as one batch (trainctl.runtime.sampler), new ones joining a running batch;
  - HFServerAdapter (the worker-side BaseRollout, in verl's _ROLLOUT_REGISTRY as ("hf", "async")) receives the
    actor's weights after every policy update (verl's `naive` checkpoint engine) and ships them to its server;
    with LoRA (`lora=r8`) verl sends the base weights once and the adapters after each update, which the server folds
    into its weights (PEFT's merge), so it samples from base + adapter.
Sleep, wake-up and KV-cache calls are no-ops: there is no accelerator memory to give back. Abort and resume are
vLLM's, which verl's async trainer modes (offpolicy=overlap: colocate_async) rely on for partial rollout:
abort_all_requests stops every request after the current sampling step and returns its tokens so far (with their
log-probs, stop_reason "aborted"), and holds new requests until resume_generation; verl's client sends the prompt and
those tokens back as a new request. Each answer carries the weight version (verl's global steps) it was sampled
under, read at every sampling step: `global_steps` the version it started under, `min_global_steps` /
`max_global_steps` the first and last, from which verl computes its staleness and span figures.

The same server is an on-policy distillation teacher (algorithm=distill: verl's teacher loop starts it with
`is_teacher_model`): a request with `prompt_logprobs` in its sampling params is scored, not sampled: one forward
pass over the student's prompt and response, returning vLLM's `prompt_ids` / `prompt_logprobs` extra fields (per
position the log-probability of the next token, or the top-k of the distribution there).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
import time
from typing import Any

import ray
import torch

from trainctl.runtime.lazy import lazy_classes
from trainctl.runtime.sampler import BatchSampler, Completion, SamplingParams, load_policy

logger = logging.getLogger(__name__)

NAME = "hf"


def server_name(replica_rank: int) -> str:
    return f"{NAME}_server_{replica_rank}_0"


class HFRolloutServer:
    """A Ray actor holding a transformers copy of the policy; verl's agent loop calls `generate` on it.

    Requests arrive concurrently (verl's agent-loop workers await many `generate` calls at once; the actor runs
    them as coroutines on one event loop). Each is queued; one scheduler task runs the batch sampler step by step
    in a worker thread, and between steps the requests that came in meanwhile join the batch."""

    def __init__(self, config, model_config, replica_rank: int = 0):
        self.config = config
        self.replica_rank = replica_rank
        # the replica hands over the model section as verl's config holds it (a DictConfig, not HFModelConfig)
        get = model_config.get if hasattr(model_config, "get") else lambda k, d=None: getattr(model_config, k, d)
        path = get("local_path", None) or get("path")
        attn = (get("override_config", None) or {}).get("attn_implementation") or "sdpa"
        threads = int(os.environ.get("TRAINCTL_ROLLOUT_THREADS", "1"))
        torch.set_num_threads(max(1, threads))
        self.model, tok, self.eos_ids = load_policy(path, attn)
        self.global_steps: int | None = None
        self.weight_version = 0
        self.peft_model = None  # the model with LoRA adapters injected, after the first LoRA sync
        seed = int(getattr(config, "seed", 0) or 0)
        self.generator = torch.Generator().manual_seed(seed + 1000 * replica_rank)
        # vLLM's batch limits, which verl's rollout config carries: sequences per batch, tokens per prefill pass
        self.sampler = BatchSampler(
            self.model,
            self.eos_ids,
            generator=self.generator,
            tokenizer=tok,
            max_batch_size=getattr(config, "max_num_seqs", None) or 256,
            max_prefill_tokens=getattr(config, "max_num_batched_tokens", None) or 8192,
            pad_id=tok.pad_token_id or 0,
        )
        # the model is used by the sampler's thread and replaced by update_weights: never both at once
        self._model_lock = threading.Lock()
        self._incoming: list[tuple[str, list[int], SamplingParams, asyncio.Future]] = []
        self._waiters: dict[int, tuple[str, asyncio.Future]] = {}  # sampler key -> request id, its caller's future
        # sampler key -> [first, last] weight version (global steps) the request got a token under
        self._versions: dict[int, list[int | None]] = {}
        self._scheduler: asyncio.Task | None = None
        # vLLM's gate: closed by abort_all_requests, opened by resume_generation; requests wait behind it (or are
        # refused with reject_request)
        self._paused = False
        self._rejecting = False
        self._parked: list[asyncio.Future] = []
        self._abort: asyncio.Future | None = None  # an abort the scheduler carries out after its current step
        self.tokens_generated = 0
        self.seconds = 0.0
        self.aborted = 0  # requests stopped by abort_all_requests

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
        if not prompt_ids:  # refused here, not inside the batch, where it would fail the other requests too
            raise ValueError(f"hf rollout: request {request_id} has an empty prompt")
        if params.get("prompt_logprobs") is not None:  # a distillation teacher scores the student's tokens
            fields = await asyncio.to_thread(self._prompt_logprobs, prompt_ids, int(params["prompt_logprobs"]))
            return TokenOutput(
                token_ids=fields.pop("next"), log_probs=None, stop_reason="completed", extra_fields=fields
            )
        max_tokens = self._max_tokens(len(prompt_ids), params)
        want_log_probs = params.pop("logprobs", None) not in (None, False)
        request = SamplingParams.from_request(params, max_tokens)
        loop = asyncio.get_running_loop()
        while self._paused:  # vLLM's gate: held until resume_generation, or refused
            if self._rejecting:
                return TokenOutput(token_ids=[], log_probs=None, stop_reason="aborted", extra_fields=self._steps())
            self._parked.append(loop.create_future())
            await self._parked[-1]
        done = loop.create_future()
        self._incoming.append((request_id, prompt_ids, request, done))
        if self._scheduler is None:
            self._scheduler = asyncio.create_task(self._schedule())
        completion, first, last = await done
        return TokenOutput(
            token_ids=completion.token_ids,
            log_probs=completion.log_probs if want_log_probs else None,
            # verl tells finished ("completed") from "aborted"; vLLM's stop and length stops are both finished
            stop_reason="aborted" if completion.finish_reason == "abort" else "completed",
            extra_fields=self._steps(first, last),
        )

    def _steps(self, first: int | None = None, last: int | None = None) -> dict:
        """The weight versions of an answer, as verl's tags want them: the one it started under as `global_steps`
        (vLLM's: verl's async client reads this one per attempt), and its first and last; none before verl set one."""
        first = self.global_steps if first is None else first
        last = first if last is None else last
        if first is None:
            return {}
        return {"global_steps": first, "min_global_steps": first, "max_global_steps": last}

    async def _schedule(self) -> None:
        """Run the batch while it has work; requests that arrived during a step join before the next one."""
        started, tokens, steps, requests = time.perf_counter(), self.tokens_generated, self.sampler.steps, 0
        try:
            while self._incoming or self.sampler.busy:
                if self._abort is not None:
                    self._abort_in_flight()
                    break
                requests += len(self._incoming)
                for request_id, prompt_ids, request, done in self._incoming:
                    self._waiters[self.sampler.add(prompt_ids, request)] = (request_id, done)
                self._incoming.clear()
                start = time.perf_counter()
                finished = await asyncio.to_thread(self._step)
                self.seconds += time.perf_counter() - start
                for key, completion in finished:
                    self._answer(key, completion)
        except BaseException as err:  # a failed step fails every request in it, not the server
            for done in [*(d for _, d in self._waiters.values()), *(d for *_, d in self._incoming)]:
                if not done.done():
                    done.set_exception(err)
            self._waiters.clear()
            self._incoming.clear()
            self._versions.clear()
            self.sampler.reset()
            if not isinstance(err, Exception):
                raise
        finally:
            self._scheduler = None
            if self._abort is not None:  # nothing (left) to abort
                self._abort_in_flight()
            logger.debug(
                "hf rollout: %d requests, %d tokens in %.3fs (%d decode steps, up to %d requests at once)",
                requests,
                self.tokens_generated - tokens,
                time.perf_counter() - started,
                self.sampler.steps - steps,
                self.sampler.largest_batch,
            )

    def _answer(self, key: int, completion: Completion) -> str:
        """Hand a finished (or aborted) request's completion and weight versions to its caller; its request id."""
        self.tokens_generated += len(completion.token_ids)
        request_id, done = self._waiters.pop(key)
        first, last = self._versions.pop(key, (None, None))
        if not done.done():  # its caller may have been cancelled
            done.set_result((completion, first, last))
        return request_id

    def _abort_in_flight(self) -> None:
        """Between two steps: stop every request, each answered with its tokens so far (none for one that has not
        joined the batch yet), and tell abort_all_requests which."""
        stopped = self.sampler.abort()
        self.aborted += len(stopped) + len(self._incoming)
        logger.info(
            "hf rollout: aborted %d requests (%d tokens sampled so far), %d not started",
            len(stopped),
            sum(len(c.token_ids) for _, c in stopped),
            len(self._incoming),
        )
        ids = [self._answer(key, completion) for key, completion in stopped]
        for request_id, _, _, done in self._incoming:
            if not done.done():
                done.set_result((Completion([], [], "abort"), None, None))
            ids.append(request_id)
        self._incoming.clear()
        aborted, self._abort = self._abort, None
        if aborted is not None and not aborted.done():
            aborted.set_result(ids)

    def _prompt_logprobs(self, ids: list[int], k: int) -> dict:
        """What vLLM returns for `prompt_logprobs=k` (verl's extract_prompt_logprobs): for each position but the
        last, the log-probability of the token that follows it (k=0) or the k most likely next tokens (ids and
        log-probabilities, most likely first); the last position a dummy row, as vLLM's first is None. Also the
        greedy next token, as the one token the teacher's request asks to generate."""
        with self._model_lock, torch.inference_mode():
            logits = self.model(torch.tensor([ids])).logits[0].float()
        logprobs = torch.log_softmax(logits, dim=-1)
        follow = torch.tensor(ids[1:])
        if k == 0:
            values = logprobs[:-1].gather(1, follow[:, None])
            tokens = follow[:, None]
        else:
            values, tokens = logprobs[:-1].topk(min(k, logprobs.shape[-1]), dim=-1)
        width = max(k, 1)
        return {
            "prompt_ids": [*tokens.tolist(), [0] * width],
            "prompt_logprobs": [*values.tolist(), [0.0] * width],
            "next": [int(logits[-1].argmax())],
        }

    def _step(self) -> list[tuple[Any, Completion]]:
        with self._model_lock:
            finished = self.sampler.step()
            # the weights (and their version) change only under this lock: every token of this step is of this one
            version = self.global_steps
            for key in [*(key for key, _ in self.sampler.partial()), *(key for key, _ in finished)]:
                self._versions.setdefault(key, [version, version])[1] = version
            return finished

    def update_weights(
        self,
        state: dict[str, torch.Tensor],
        peft_config: dict | None = None,
        base_sync_done: bool = False,
        global_steps: int | None = None,
    ) -> int:
        """Load the actor's weights; returns how many tensors were taken (all of the model's, or an error).
        global_steps, when given, becomes their version in the same step boundary (set_global_steps' value).

        With LoRA (verl sends a peft_config), the first sync may carry the base weights (base_sync_done=False, names
        as in the model, `.base_layer` on adapted layers) and every sync after an update carries the adapters alone
        (PEFT's names): they are folded into the weights the sampler uses, base + B @ A x alpha / r."""
        if peft_config is not None:
            return self._update_lora(state, peft_config, base_sync_done, global_steps)
        own = self.model.state_dict()
        missing = [k for k in own if k not in state and not self._tied(k)]
        unknown = [k for k in state if k not in own]
        if unknown or missing:
            raise RuntimeError(
                f"hf rollout: weights do not match the model: unknown {unknown[:3]}, missing {missing[:3]}"
            )
        with self._model_lock:  # between two sampling steps
            self.model.load_state_dict(state, strict=False)
            self._new_version(global_steps)
        return len(state)

    def _new_version(self, global_steps: int | None) -> None:
        self.weight_version += 1
        if global_steps is not None:
            self.global_steps = global_steps

    def _update_lora(
        self, state: dict[str, torch.Tensor], peft_config: dict, base_sync_done: bool, global_steps: int | None
    ) -> int:
        # PEFT does the LoRA arithmetic: the adapters are injected once (in place: the sampler's model object is
        # unchanged), then each sync unmerges the old adapters, loads the new ones and merges them, so sampling runs
        # on plain merged weights at full-fine-tuning speed
        from peft.tuners.tuners_utils import BaseTunerLayer
        from peft.utils import set_peft_model_state_dict

        with self._model_lock:
            peft_model = self._peft_model(peft_config)
            if any(m.merged for m in peft_model.modules() if isinstance(m, BaseTunerLayer)):
                peft_model.unmerge_adapter()
            try:
                if base_sync_done:
                    result = set_peft_model_state_dict(peft_model, state)
                    unknown = [k for k in result.unexpected_keys if "lora_" in k]
                    if unknown:
                        raise RuntimeError(f"hf rollout: adapter weights do not match the model: {unknown[:3]}")
                else:
                    self._load_base(peft_model, state)
            finally:
                peft_model.merge_adapter()
            self._new_version(global_steps)
        return len(state)

    def _peft_model(self, peft_config: dict):
        if self.peft_model is None:
            import dataclasses

            from peft import LoraConfig, get_peft_model

            fields = {f.name for f in dataclasses.fields(LoraConfig) if f.init}
            config = LoraConfig(**{k: v for k, v in peft_config.items() if k in fields})
            config.inference_mode = True
            self.peft_model = get_peft_model(self.model, config)
            self.peft_model.eval()
        return self.peft_model

    def _load_base(self, peft_model, state: dict[str, torch.Tensor]) -> None:
        """The base weights, into the layers under the adapters (`q_proj.weight` is `q_proj.base_layer.weight`)."""
        inner = peft_model.get_base_model()
        own = inner.state_dict()
        renamed = {}
        for name, tensor in state.items():
            plain = name.replace(".base_layer.", ".")
            target = plain.rsplit(".", 1)
            wrapped = f"{target[0]}.base_layer.{target[1]}" if len(target) == 2 else plain
            key = wrapped if wrapped in own else plain
            if key not in own:
                raise RuntimeError(f"hf rollout: base weight {name} is not a weight of the model")
            renamed[key] = tensor
        missing = [k for k in own if k not in renamed and "lora_" not in k and not self._tied(k)]
        if missing:
            raise RuntimeError(f"hf rollout: the base weights miss {missing[:3]}")
        inner.load_state_dict(renamed, strict=False)

    def _tied(self, key: str) -> bool:
        return key.endswith("lm_head.weight") and bool(getattr(self.model.config, "tie_word_embeddings", False))

    def stats(self) -> dict:
        return {
            "tokens": self.tokens_generated,
            "seconds": self.seconds,
            "weight_version": self.weight_version,
            "decode_steps": self.sampler.steps,
            "largest_batch": self.sampler.largest_batch,
            "aborted": self.aborted,
        }

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

    # --- vLLM's pause and resume (verl's partial rollout) ---
    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False) -> dict:
        """Close the gate (new requests wait for resume_generation, or with reject_request are answered "aborted"
        at once), then stop every request in flight after the current sampling step; each returns its tokens so far
        with stop_reason "aborted". Returns vLLM's answer: how many, and their request ids."""
        self._paused, self._rejecting = True, bool(reject_request)
        if self._scheduler is None:
            return {"aborted_count": 0, "request_ids": []}
        if self._abort is None:
            self._abort = asyncio.get_running_loop().create_future()
        ids = await asyncio.shield(self._abort)
        return {"aborted_count": len(ids), "request_ids": ids}

    async def resume_generation(self, *args, **kwargs):
        """Open the gate: the requests held behind it join the batch."""
        self._paused = self._rejecting = False
        parked, self._parked = self._parked, []
        for waiter in parked:
            if not waiter.done():
                waiter.set_result(None)

    async def start_profile(self, *args, **kwargs):
        return None

    async def stop_profile(self, *args, **kwargs):
        return None

    async def set_global_steps(self, global_steps: int):
        """The weights' version (HFServerAdapter passes it with the weights instead, so both change together)."""
        self.global_steps = global_steps


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
            # a distillation teacher's servers (verl's teacher loop) run beside the policy's: a name of their own
            name = server_name(self.replica_rank)
            if self.is_teacher_model:
                name = f"{NAME}_teacher{self.name_suffix}_server_{self.replica_rank}_0"
            options: dict[str, Any] = {
                "name": name,
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
            # LoRA: verl sends its peft_config with the base weights (once) and with the adapters (every update)
            peft_config = kw.get("peft_config")
            from verl.workers.rollout.utils import ensure_async_iterator

            state = {}
            # a generator from the actor's engine (naive engine), or an async one from a checkpoint engine's
            # receive_weights (offpolicy=split: a rollout process of its own, trainctl.runtime.cpu_checkpoint_engine)
            async for name, tensor in ensure_async_iterator(weights):
                if hasattr(tensor, "full_tensor"):
                    tensor = tensor.full_tensor()
                if self.leads:
                    state[name] = tensor.detach().to("cpu", copy=True)
            if self.leads:  # the version changes with the weights, between the same two sampling steps
                base_sync_done = bool(kw.get("base_sync_done"))
                await self._server().update_weights.remote(state, peft_config, base_sync_done, global_steps)

        def generate_sequences(self, prompts):
            raise NotImplementedError("the hf rollout is a server: verl's agent loop calls it")

    return HFServerAdapter


# verl imports the adapter by dotted path from _ROLLOUT_REGISTRY, and the replica through its registry's loader:
# each built on first use
__getattr__ = lazy_classes(__name__, {"HFServerAdapter": _adapter_class, "HFReplica": _replica_class})


def register() -> None:
    """Make `rollout.name=hf` known to verl in this process (idempotent)."""
    from verl.workers.rollout import base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    RolloutReplicaRegistry.register(NAME, functools.partial(__getattr__, "HFReplica"))
    # verl's registry of worker-side rollouts is this dict (no register function): a new key, nothing of verl's
    # replaced, so a registration like the line above rather than a patch (trainctl.runtime.verl_patches)
    base._ROLLOUT_REGISTRY[(NAME, "async")] = f"{__name__}.HFServerAdapter"
