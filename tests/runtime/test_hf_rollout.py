"""trainctl's transformers rollout: it samples from the weights it holds, and takes new weights when verl sends
them (the PPO-family runs in tests/launch/test_ppo.py drive it through verl itself)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
import torch

from trainctl.runtime.hf_rollout import HFRolloutServer, sample


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
    server.eos_ids = {greedy.token_ids[0]}
    stopped = _generate(server, PROMPT)
    assert stopped.token_ids == greedy.token_ids[:1] and stopped.stop_reason == "completed"
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    a = sample(server.model, PROMPT, 8, set(), 1.0, -1, 0.9, g1)
    b = sample(server.model, PROMPT, 8, set(), 1.0, -1, 0.9, g2)
    assert a == b, "seeded sampling is reproducible"
