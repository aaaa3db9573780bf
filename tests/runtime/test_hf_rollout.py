"""trainctl's transformers rollout: it samples from the weights it holds, and takes new weights when verl sends
them (the PPO-family runs in tests/launch/test_ppo.py drive it through verl itself)."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import pytest
import torch

from trainctl.runtime.hf_rollout import HFRolloutServer


@pytest.fixture
def server(tiny_model_dir):
    config = SimpleNamespace(prompt_length=64, response_length=12)
    return HFRolloutServer(config, {"local_path": str(tiny_model_dir), "override_config": {}})


def _generate(server, prompt, **params):
    params = {"temperature": 0.0, "logprobs": True, **params}
    return asyncio.run(server.generate(prompt_ids=prompt, sampling_params=params, request_id="r"))


PROMPT = [5, 17, 42, 99, 3]


def test_log_probs_are_the_models_own(server):
    out = _generate(server, PROMPT)
    assert 1 <= len(out.token_ids) <= 12 and len(out.log_probs) == len(out.token_ids)
    ids = torch.tensor([PROMPT + out.token_ids])
    with torch.no_grad():
        logits = server.model(ids).logits[0].float().log_softmax(-1)
    expected = [float(logits[len(PROMPT) - 1 + i, t]) for i, t in enumerate(out.token_ids)]
    assert out.log_probs == pytest.approx(expected, abs=1e-4)
    greedy = [int(logits[len(PROMPT) - 1 + i].argmax()) for i in range(len(out.token_ids))]
    assert out.token_ids == greedy


def test_samples_depend_on_the_weights_and_follow_updates(server):
    before = _generate(server, PROMPT)
    # the same shift for every tensor, so that tied embeddings stay equal
    state = {k: v + 0.05 for k, v in server.model.state_dict().items()}
    assert server.update_weights(state) == len(state)
    after = _generate(server, PROMPT)
    assert after.log_probs != before.log_probs, "new weights, new log-probs"
    got = server.model.state_dict()
    assert all(torch.equal(got[k], v) for k, v in state.items())
    assert server.stats()["weight_version"] == 1


def test_weights_that_do_not_fit_are_refused(server):
    with pytest.raises(RuntimeError, match="unknown"):
        server.update_weights({"not.a.weight": torch.zeros(1)})


def test_sampling_parameters(server):
    greedy = _generate(server, PROMPT)
    top1 = _generate(server, PROMPT, temperature=1.0, top_k=1)
    assert top1.token_ids == greedy.token_ids, "top-k 1 is greedy"
    short = _generate(server, PROMPT, max_tokens=3)
    assert len(short.token_ids) == 3
    stop = greedy.token_ids[1]
    stopped = _generate(server, PROMPT, stop_token_ids=[stop])
    assert stopped.token_ids == greedy.token_ids[: greedy.token_ids.index(stop) + 1]
    assert stopped.stop_reason == "completed"
    assert _generate(server, PROMPT, logprobs=False).log_probs is None, "log-probs only when asked"
    with pytest.raises(NotImplementedError, match="frequency_penalty"):
        _generate(server, PROMPT, frequency_penalty=0.3)


def test_seeded_sampling_is_reproducible(tiny_model_dir):
    def draw():
        config = SimpleNamespace(prompt_length=64, response_length=12, seed=7)
        server = HFRolloutServer(config, {"local_path": str(tiny_model_dir), "override_config": {}})
        return _generate(server, PROMPT, temperature=1.0, top_p=0.9).token_ids

    assert draw() == draw()


async def _concurrently(server, requests):
    calls = [
        server.generate(prompt_ids=prompt, sampling_params={"logprobs": True, **params}, request_id=f"r{i}")
        for i, (prompt, params) in enumerate(requests)
    ]
    return await asyncio.gather(*calls)


def test_concurrent_requests_are_sampled_as_one_batch(server):
    """verl's agent loop awaits many generate calls at once: they run as one batch, each with its own settings
    (a stop token id from the tool parser, a length, greedy or sampled), and get what they would alone."""
    prompts = [PROMPT, [9, 8, 7], list(range(20, 41)), [100, 200], [3] * 9, [44, 45, 46, 47]]
    alone = [_generate(server, p) for p in prompts]
    assert server.stats()["largest_batch"] == 1
    requests = [(p, {"temperature": 0.0}) for p in prompts]
    requests[1][1]["stop_token_ids"] = [alone[1].token_ids[2]]
    requests[2][1]["max_tokens"] = 5
    requests[3] = (prompts[3], {"temperature": 1.0, "top_p": 0.8})
    before = server.stats()
    together = asyncio.run(_concurrently(server, requests))
    after = server.stats()
    assert after["largest_batch"] == len(prompts), "the concurrent requests formed one batch"
    assert after["decode_steps"] - before["decode_steps"] < sum(len(o.token_ids) for o in together) / 2
    stop = alone[1].token_ids[2]
    assert together[1].token_ids == alone[1].token_ids[: alone[1].token_ids.index(stop) + 1]
    assert together[2].token_ids == alone[2].token_ids[:5]
    for i in (0, 4, 5):
        assert together[i].token_ids == alone[i].token_ids
        assert together[i].log_probs == pytest.approx(alone[i].log_probs, abs=1e-4)
    assert 1 <= len(together[3].token_ids) <= 12 and len(together[3].log_probs) == len(together[3].token_ids)


# a greedy request that runs its whole budget (response_length 12): an abort or a new version lands inside it
LONG = {"temperature": 0.0, "logprobs": True, "ignore_eos": True}


def _hold_after(server, steps: int) -> tuple[threading.Event, threading.Event]:
    """Hold the server's sampling thread once its sampler has made `steps` decode steps, until released: the test
    acts between two steps, where verl's calls land."""
    reached, release = threading.Event(), threading.Event()
    step = server._step

    def held():
        finished = step()
        if server.sampler.steps == steps:
            reached.set()
            release.wait(30)
        return finished

    server._step = held
    return reached, release


def _start(server, prompt, request_id="r", **params):
    call = server.generate(prompt_ids=prompt, sampling_params={**LONG, **params}, request_id=request_id)
    return asyncio.create_task(call)


def test_a_request_reports_the_weight_version_it_started_under(server):
    """verl's staleness and span figures read a sample's versions from its answer: the one it started under
    (global_steps, as verl's async client reads it per attempt) and the first and last it got tokens under."""

    async def run():
        await server.set_global_steps(3)
        reached, release = _hold_after(server, 3)
        task = _start(server, PROMPT)
        await asyncio.to_thread(reached.wait, 30)
        await server.set_global_steps(4)  # new weights between two of its steps
        release.set()
        return await task

    out = asyncio.run(run())
    assert len(out.token_ids) == 12 and out.stop_reason == "completed"
    fields = out.extra_fields
    assert fields["global_steps"] == 3, "the version it started under, not the one it finished under"
    assert (fields["min_global_steps"], fields["max_global_steps"]) == (3, 4)
    # the adapter sends the version with the weights: both change between the same two steps
    server.update_weights(dict(server.model.state_dict()), global_steps=5)
    assert server.global_steps == 5 and _generate(server, PROMPT).extra_fields["global_steps"] == 5


def test_an_aborted_request_returns_its_tokens_so_far_and_resumes(server):
    """verl's partial rollout (colocate_async): abort_all_requests stops the request between two sampling steps, it
    answers "aborted" with its tokens and their log-probs; verl's client sends prompt + those tokens back, held
    until resume_generation, and the two parts make what the request would have made uninterrupted."""
    whole = _generate(server, PROMPT, ignore_eos=True)
    assert len(whole.token_ids) == 12

    async def run():
        await server.set_global_steps(1)
        reached, release = _hold_after(server, server.sampler.steps + 3)
        task = _start(server, PROMPT)
        await asyncio.to_thread(reached.wait, 30)
        abort = asyncio.create_task(server.abort_all_requests())
        await asyncio.sleep(0)  # the abort is asked for while a step runs, and carried out after it
        release.set()
        partial, aborted = await task, await abort
        assert aborted == {"aborted_count": 1, "request_ids": ["r"]}
        rest = _start(server, PROMPT + partial.token_ids, max_tokens=12 - len(partial.token_ids))
        await asyncio.sleep(0.2)
        assert not rest.done(), "held behind the closed gate"
        server.update_weights(dict(server.model.state_dict()), global_steps=2)
        await server.resume_generation()
        return partial, await rest

    partial, rest = asyncio.run(run())
    n = len(partial.token_ids)
    assert partial.stop_reason == "aborted" and 1 <= n < 12
    assert partial.token_ids == whole.token_ids[:n]
    assert partial.log_probs == pytest.approx(whole.log_probs[:n], abs=1e-4)
    assert rest.stop_reason == "completed"
    assert partial.token_ids + rest.token_ids == whole.token_ids
    assert partial.log_probs + rest.log_probs == pytest.approx(whole.log_probs, abs=1e-4)
    assert partial.extra_fields["global_steps"] == 1 and rest.extra_fields["global_steps"] == 2


def test_a_closed_gate_refuses_with_reject_request_and_an_idle_abort_is_empty(server):
    async def run():
        assert await server.abort_all_requests(reject_request=True) == {"aborted_count": 0, "request_ids": []}
        refused = await server.generate(prompt_ids=PROMPT, sampling_params=dict(LONG), request_id="late")
        await server.resume_generation()
        return refused, await _start(server, PROMPT)

    refused, served = asyncio.run(run())
    assert refused.stop_reason == "aborted" and refused.token_ids == []
    assert served.stop_reason == "completed" and len(served.token_ids) == 12


def test_a_sync_request_is_answered_as_before(server):
    """verl's sync trainer never aborts: an answer is whole, "completed", under the one version verl set (none
    before it sets one), and the same tokens whatever the version says."""
    plain = _generate(server, PROMPT)
    assert plain.stop_reason == "completed" and plain.extra_fields == {}
    asyncio.run(server.set_global_steps(2))
    tagged = _generate(server, PROMPT)
    assert tagged.token_ids == plain.token_ids and tagged.log_probs == plain.log_probs
    assert tagged.extra_fields == {"global_steps": 2, "min_global_steps": 2, "max_global_steps": 2}


def _lora_actor(tiny_model_dir, scale: float):
    """An actor-side PEFT model as verl's FSDP engine builds it (all-linear, no dropout), its adapters moved off
    their zero initialisation so that they change what the model says."""
    from peft import LoraConfig, TaskType, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    config = LoraConfig(task_type=TaskType.CAUSAL_LM, r=8, lora_alpha=16, target_modules="all-linear", bias="none")
    actor = get_peft_model(base, config)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in actor.named_parameters():
            if "lora_B" in name:
                p.copy_(scale * torch.randn(p.shape, generator=generator))
    return actor.eval()


def _verl_sync(actor, base_sync_done: bool):
    """What verl's FSDP engine sends to a rollout (get_per_tensor_param without FSDP): its own functions."""
    from verl.utils.fsdp_utils import collect_lora_params, replace_lora_wrapper

    peft_config = actor.peft_config["default"]
    params = collect_lora_params(module=actor, layered_summon=False, base_sync_done=base_sync_done)
    if not base_sync_done:
        params = {replace_lora_wrapper(k, peft_config): v for k, v in params.items()}
    return dict(params), peft_config.to_dict()


def _continuation_log_probs(model, prompt, continuation) -> list[float]:
    ids = torch.tensor([prompt + continuation])
    with torch.no_grad():
        logits = model(ids).logits[0].float().log_softmax(-1)
    return [float(logits[len(prompt) - 1 + i, t]) for i, t in enumerate(continuation)]


def test_lora_sync_makes_the_rollout_sample_from_base_plus_adapter(server, tiny_model_dir):
    """verl's LoRA sync: the base once, then the adapters after every update. The rollout's log-probs of a fixed
    continuation change with the adapters and equal those of the actor's own (unmerged) PEFT model."""
    before = _generate(server, PROMPT)
    fixed = before.token_ids
    base_scores = _continuation_log_probs(server.model, PROMPT, fixed)

    actor = _lora_actor(tiny_model_dir, scale=0.3)
    base, config = _verl_sync(actor, base_sync_done=False)
    assert any(".base_layer." in k for k in base), "verl names adapted layers' base weights .base_layer"
    assert server.update_weights(base, config, base_sync_done=False) == len(base)
    # base weights and still-zero adapters: the model is the base
    assert _generate(server, PROMPT).log_probs == pytest.approx(before.log_probs, abs=1e-5)

    for step, scale in enumerate((0.3, 0.6), start=1):
        if scale != 0.3:
            actor = _lora_actor(tiny_model_dir, scale=scale)  # "after an update": new adapter weights
        adapters, config = _verl_sync(actor, base_sync_done=True)
        assert adapters and all("lora_" in k for k in adapters), "after the first sync, only adapters travel"
        server.update_weights(adapters, config, base_sync_done=True)
        scores = _continuation_log_probs(server.model, PROMPT, fixed)
        assert scores != pytest.approx(base_scores, abs=1e-3), "the adapters change the rollout's log-probs"
        assert scores == pytest.approx(_continuation_log_probs(actor, PROMPT, fixed), abs=1e-4)
        # and what it samples is scored by base + adapter
        sampled = _generate(server, PROMPT)
        assert sampled.log_probs == pytest.approx(_continuation_log_probs(actor, PROMPT, sampled.token_ids), abs=1e-4)
        assert server.stats()["weight_version"] == 1 + step


@pytest.mark.parametrize("k", [0, 3])
def test_a_distillation_teacher_scores_every_token_as_vllm_does(server, k):
    """verl's teacher loop (algorithm=distill) asks its server for `prompt_logprobs`: per position the next token's
    log-probability (k=0) or the top k, then vLLM's dummy last row (verl's extract_prompt_logprobs)."""
    out = _generate(server, PROMPT, prompt_logprobs=k, max_tokens=1)
    ids, values = out.extra_fields["prompt_ids"], out.extra_fields["prompt_logprobs"]
    assert len(ids) == len(values) == len(PROMPT) and ids[-1] == [0] * max(k, 1)
    with torch.no_grad():
        logits = server.model(torch.tensor([PROMPT])).logits[0].float().log_softmax(-1)
    for i in range(len(PROMPT) - 1):
        if k == 0:
            assert ids[i] == [PROMPT[i + 1]]
            assert values[i] == pytest.approx([float(logits[i, PROMPT[i + 1]])], abs=1e-5)
        else:
            top = logits[i].topk(k)
            assert ids[i] == top.indices.tolist() and values[i] == pytest.approx(top.values.tolist(), abs=1e-5)
    assert out.token_ids == [int(logits[-1].argmax())]
