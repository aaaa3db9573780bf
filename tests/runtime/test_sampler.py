"""The batched sampler: what each request gets inside a batch is what it would get alone.

References are computed here independently: one request at a time, the whole sequence through the model at every
token (no KV cache, no padding), and the sampling distribution written out from its definition.
"""

from __future__ import annotations

import pytest
import torch

from trainctl.runtime.sampler import BatchSampler, SamplingParams, generate

EOS = 2  # the tiny model's "<|im_end|>"


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # as the rollout server runs (TRAINCTL_ROLLOUT_THREADS=1): a tiny model gains nothing from more threads, and
    # on a busy 2-core machine two threads wait on each other many times slower
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32, attn_implementation="sdpa").eval()


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _logits(model, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(torch.tensor([ids])).logits[0, -1].float()


def one_at_a_time(model, prompt, max_tokens, stop_ids=(), penalty=1.0):
    """Greedy decoding of one request, the slow and obvious way: (tokens, raw log-probs)."""
    ids, out, logps = list(prompt), [], []
    for _ in range(max_tokens):
        logits = _logits(model, ids)
        scores = logits.clone()
        if penalty != 1.0:
            seen = torch.tensor(sorted(set(ids)))
            scores[seen] = torch.where(scores[seen] > 0, scores[seen] / penalty, scores[seen] * penalty)
        token = int(scores.argmax())
        out.append(token)
        logps.append(float(logits.log_softmax(-1)[token]))
        ids.append(token)
        if token in stop_ids:
            break
    return out, logps


def _prompts(n: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = [3, 17, 5, 30, 9, 1, 24, 12, 7, 40][:n]
    return [torch.randint(3, 500, (k,), generator=g).tolist() for k in lengths]


def test_greedy_in_a_batch_is_token_for_token_one_at_a_time(model):
    prompts = _prompts(10)
    alone = [one_at_a_time(model, p, 16) for p in prompts]
    # per request: its own max_tokens, its own stop token (one its greedy answer reaches), some sampled rows
    params, expected = [], {}
    for i, (tokens, _) in enumerate(alone):
        if i % 3 == 2:
            params.append(SamplingParams(max_tokens=12, temperature=0.9, top_k=50, top_p=0.9))
            continue
        max_tokens = 6 + i
        stop = tokens[4] if i % 3 == 1 else None
        params.append(SamplingParams(max_tokens=max_tokens, temperature=0.0, stop_token_ids=(stop,) if stop else ()))
        stops = {EOS} if stop is None else {EOS, stop}
        want = tokens[:max_tokens]
        hit = next((t for t in want if t in stops), None)
        want = want if hit is None else want[: want.index(hit) + 1]
        expected[i] = (want, "length" if hit is None else "stop", hit)
    # fewer rows than requests and small prefill passes: requests queue, join a running batch, and leave it
    got = generate(model, prompts, params, [EOS], generator=torch.Generator().manual_seed(0), max_batch_size=4,
                   max_prefill_tokens=40)  # fmt: skip
    for i, completion in enumerate(got):
        _, ref_logps = one_at_a_time(model, prompts[i], len(completion.token_ids))
        if i in expected:
            want, reason, stop = expected[i]
            assert completion.token_ids == want, f"request {i}"
            assert (completion.finish_reason, completion.stop_reason) == (reason, stop)
            assert completion.log_probs == pytest.approx(ref_logps, abs=1e-4)
        else:  # sampled: the log-probs are still the model's own for the tokens it drew
            assert 1 <= len(completion.token_ids) <= 12
            logps = [
                float(_logits(model, prompts[i] + completion.token_ids[:t]).log_softmax(-1)[tok])
                for t, tok in enumerate(completion.token_ids)
            ]
            assert completion.log_probs == pytest.approx(logps, abs=1e-4)


def test_a_prompt_sampled_n_times_is_prefilled_once_and_each_sample_is_its_own(model):
    """GRPO's n samples of a prompt arrive as n requests: the prompt is prefilled once for all of them, and each
    still gets what it would alone (greedy: the same answer; sampled: the model's own log-probs of its tokens)."""
    prompts = _prompts(3, seed=2)
    requests = [p for p in prompts for _ in range(4)]  # verl's order: each prompt's samples together
    greedy = SamplingParams(max_tokens=10, temperature=0.0)
    sampled = SamplingParams(max_tokens=10, temperature=1.0)
    params = [greedy if i % 4 == 0 else sampled for i in range(len(requests))]
    prefill_rows = []
    forward = model.forward

    def counting(*args, **kwargs):
        ids = kwargs["input_ids"]
        if ids.shape[1] > 1:  # a prefill pass (decode passes take one token a row)
            prefill_rows.append(ids.shape[0])
        return forward(*args, **kwargs)

    model.forward = counting
    try:
        got = generate(model, requests, params, [EOS], generator=torch.Generator().manual_seed(0))
    finally:
        del model.forward
    assert prefill_rows == [3], "one prefill pass, one row a prompt"
    for i, completion in enumerate(got):
        prompt = requests[i]
        if i % 4 == 0:
            tokens, logps = one_at_a_time(model, prompt, 10)
            want = tokens[: tokens.index(EOS) + 1] if EOS in tokens else tokens
            assert completion.token_ids == want, f"request {i}"
            assert completion.log_probs == pytest.approx(logps[: len(want)], abs=1e-4)
        else:
            logps = [
                float(_logits(model, prompt + completion.token_ids[:t]).log_softmax(-1)[tok])
                for t, tok in enumerate(completion.token_ids)
            ]
            assert completion.log_probs == pytest.approx(logps, abs=1e-4)
    # the samples of a prompt differ (they are drawn, not copied)
    assert len({tuple(c.token_ids) for c in got[1:4]}) > 1


def test_requests_that_join_a_running_batch_get_what_they_would_alone(model):
    prompts = _prompts(6, seed=1)
    sampler = BatchSampler(model, [EOS])
    done = {}
    greedy = SamplingParams(max_tokens=14, temperature=0.0)
    for i in (0, 3):
        sampler.add(prompts[i], greedy, key=i)
    for _ in range(5):
        done.update(sampler.step())
    for i in (1, 2, 4, 5):  # a shorter and a longer prompt than the running rows have cached
        sampler.add(prompts[i], greedy, key=i)
    while sampler.busy:
        done.update(sampler.step())
    assert sampler.largest_batch == 6
    for i, p in enumerate(prompts):
        tokens, logps = one_at_a_time(model, p, 14)
        assert done[i].token_ids == tokens, f"request {i}"
        assert done[i].log_probs == pytest.approx(logps, abs=1e-4)


def test_cancelled_requests_leave_and_the_others_go_on_as_alone(model):
    """What `model serve` does for a client that hung up: `cancel` between steps, waiting or running; `partial`
    shows each running request's tokens so far (what a stream sends)."""
    prompts = _prompts(4, seed=3)
    sampler = BatchSampler(model, [EOS], max_batch_size=3)
    greedy = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    for i, p in enumerate(prompts):
        sampler.add(p, greedy, key=i)
    done = dict(sampler.step())
    for _ in range(3):
        done.update(sampler.step())
    partial = dict(sampler.partial())
    assert sorted(partial) == [0, 1, 2] and len({len(t) for t in partial.values()}) == 1
    assert partial[0] == one_at_a_time(model, prompts[0], len(partial[0]))[0]
    assert sampler.cancel(1) and sampler.cancel(3)  # one running, one still waiting (max_batch_size 3)
    assert not sampler.cancel(1)
    while sampler.busy:
        done.update(sampler.step())
    assert sorted(done) == [0, 2]
    for i in (0, 2):
        assert done[i].token_ids == one_at_a_time(model, prompts[i], 12)[0]


def test_abort_stops_every_request_with_its_tokens_so_far(model):
    """vLLM's abort, as the rollout server's abort_all_requests uses it between steps: every request, running or
    still waiting, comes back with what it has (tokens and their log-probs, finish_reason "abort"); none is left."""
    prompts = _prompts(3, seed=4)
    sampler = BatchSampler(model, [EOS], max_batch_size=2)
    greedy = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    for i, p in enumerate(prompts):
        sampler.add(p, greedy, key=i)
    for _ in range(3):
        assert not sampler.step()
    stopped = dict(sampler.abort())
    assert not sampler.busy and sorted(stopped) == [0, 1, 2]
    assert {c.finish_reason for c in stopped.values()} == {"abort"}
    assert stopped[2].token_ids == [] and stopped[2].log_probs == [], "still waiting: nothing sampled"
    for i in (0, 1):
        tokens, logps = one_at_a_time(model, prompts[i], 4)
        assert stopped[i].token_ids == tokens
        assert stopped[i].log_probs == pytest.approx(logps, abs=1e-4)
    sampler.add(prompts[0], greedy, key=7)  # the sampler takes new requests after an abort
    done = {}
    while sampler.busy:
        done.update(sampler.step())
    assert done[7].token_ids == one_at_a_time(model, prompts[0], 12)[0]


def test_eos_stops_unless_ignored_and_repetition_penalty(model):
    prompt = _prompts(1, seed=2)[0]
    tokens, _ = one_at_a_time(model, prompt, 10)
    eos = tokens[3]
    stopped, ignored = generate(
        model, [prompt, prompt], [SamplingParams(10, 0.0), SamplingParams(10, 0.0, ignore_eos=True)], [eos]
    )
    cut = tokens.index(eos) + 1
    assert stopped.token_ids == tokens[:cut] and stopped.finish_reason == "stop" and stopped.stop_reason == eos
    assert ignored.token_ids == tokens and ignored.finish_reason == "length"

    penalised = generate(model, [prompt], SamplingParams(10, 0.0, repetition_penalty=1.5), [EOS])[0]
    assert penalised.token_ids == one_at_a_time(model, prompt, 10, stop_ids={EOS}, penalty=1.5)[0]


def test_stop_strings_end_the_response_where_the_text_first_contains_them(model, tokenizer):
    prompt = tokenizer("What is 2 + 3?")["input_ids"]
    tokens, _ = one_at_a_time(model, prompt, 12)
    text = tokenizer.decode(tokens)
    stop = text[len(tokenizer.decode(tokens[:4])) - 1 :][:3]  # three characters from around the 4th token
    assert stop.strip(), text
    n = next(k for k in range(1, 13) if stop in tokenizer.decode(tokens[:k]))
    got = generate(model, [prompt], SamplingParams(12, 0.0, stop=(stop,)), [EOS], tokenizer=tokenizer)[0]
    assert got.token_ids == tokens[:n] and got.finish_reason == "stop" and got.stop_reason == stop
    with pytest.raises(ValueError, match="tokenizer"):
        generate(model, [prompt], SamplingParams(12, 0.0, stop=(stop,)), [EOS])


def test_prompt_log_probs_and_the_likeliest_tokens_come_from_the_batch_as_alone(model):
    """vLLM's prompt_logprobs and logprobs (what `model serve` answers to echo and logprobs): per prompt token its
    log-prob given the tokens before it, per sampled token the k likeliest; in a batch with rows that ask for none
    and a row too long to share the prefill that keeps every position's logits."""
    prompts = _prompts(5, seed=4)
    asks = [(3, 2), (None, None), (0, None), (1, 5), (None, 0)]  # (prompt_logprobs, logprobs) per row
    sampler = BatchSampler(model, [EOS], max_prompt_logits=model.config.vocab_size * 40)
    for i, (p, (prompt_k, k)) in enumerate(zip(prompts, asks, strict=True)):
        sampler.add(p, SamplingParams(max_tokens=6, temperature=0.0, logprobs=k, prompt_logprobs=prompt_k), key=i)
    done: dict = {}
    while sampler.busy:
        done.update(sampler.step())
    for i, (p, (prompt_k, k)) in enumerate(zip(prompts, asks, strict=True)):
        c = done[i]
        with torch.inference_mode():
            logps = model(torch.tensor([p + c.token_ids])).logits[0].float().log_softmax(-1)
        if prompt_k is None:
            assert c.prompt_logprobs is None
        else:
            assert c.prompt_logprobs.token_logprobs[0] is None and c.prompt_logprobs.top[0] is None
            expected = [float(logps[j - 1, p[j]]) for j in range(1, len(p))]
            assert c.prompt_logprobs.token_logprobs[1:] == pytest.approx(expected, abs=1e-4)
            for j in range(1, len(p)):
                top = logps[j - 1].topk(prompt_k) if prompt_k else None
                assert [t for t, _ in c.prompt_logprobs.top[j]] == (top.indices.tolist() if top is not None else [])
        if not k:
            assert c.top_logprobs is None
            continue
        for j, ranked in enumerate(c.top_logprobs):
            top = logps[len(p) + j - 1].topk(k)
            assert [t for t, _ in ranked] == top.indices.tolist()
            assert [v for _, v in ranked] == pytest.approx(top.values.tolist(), abs=1e-4)
            assert ranked[0] == (c.token_ids[j], pytest.approx(c.log_probs[j]))  # greedy: the likeliest


def _expected_probs(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """The next-token distribution by definition: softmax at the temperature over the top-k tokens, then the
    smallest set of the best tokens whose probability reaches top_p, renormalised."""
    probs = (logits / temperature).softmax(-1)
    order = probs.argsort(descending=True).tolist()
    keep = order[:top_k] if top_k > 0 else order
    kept = probs[keep] / probs[keep].sum()
    if top_p < 1:
        mass, n = 0.0, 0
        while mass < top_p:
            mass += float(kept[n])
            n += 1
        keep = keep[:n]
    out = torch.zeros_like(probs)
    out[keep] = probs[keep] / probs[keep].sum()
    return out


def _chi_square_p(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Goodness of fit of observed counts to probs (bins expecting < 5 draws pooled); p-value from the chi-square
    survival function (torch's regularized upper incomplete gamma)."""
    n = counts.sum()
    expected = probs * n
    big = expected >= 5
    obs = torch.cat([counts[big], counts[~big].sum()[None]]).double()
    exp = torch.cat([expected[big], expected[~big].sum()[None]]).double()
    used = exp > 0
    obs, exp = obs[used], exp[used]
    stat = ((obs - exp) ** 2 / exp).sum()
    dof = torch.tensor(float(len(obs) - 1), dtype=torch.float64)
    return float(torch.special.gammaincc(dof / 2, stat / 2))


def test_sampled_first_tokens_follow_each_requests_own_distribution(model):
    """Mixed settings in one batch: each row's first token is drawn from its own filtered distribution."""
    prompt, other = [7, 8, 9], [5, 17, 42, 99, 3, 11, 60]
    settings = {
        "t=0.05": SamplingParams(max_tokens=1, temperature=0.05),
        "t=0.05 top_k=4": SamplingParams(max_tokens=1, temperature=0.05, top_k=4),
        "t=0.03 top_p=0.6": SamplingParams(max_tokens=1, temperature=0.03, top_p=0.6),
    }
    greedy = SamplingParams(max_tokens=1, temperature=0.0)
    logits = _logits(model, prompt)
    greedy_token = int(_logits(model, other).argmax())
    vocab = logits.shape[-1]
    counts = {name: torch.zeros(vocab) for name in settings}
    generator = torch.Generator().manual_seed(1234)
    rows = [(name, p) for name, p in settings.items() for _ in range(40)]
    for _ in range(50):  # 2000 draws per setting
        prompts = [prompt] * len(rows) + [other] * 8
        got = generate(model, prompts, [p for _, p in rows] + [greedy] * 8, [], generator=generator)
        for (name, _), completion in zip(rows, got, strict=False):
            counts[name][completion.token_ids[0]] += 1
        assert all(c.token_ids == [greedy_token] for c in got[len(rows) :])
    for name, p in settings.items():
        probs = _expected_probs(logits, p.temperature, p.top_k, p.top_p)
        outside = int(counts[name][probs == 0].sum())
        assert outside == 0, f"{name}: {outside} draws of tokens the filters exclude"
        p_value = _chi_square_p(counts[name], probs)
        assert p_value > 1e-3, f"{name}: the draws do not fit the distribution (chi-square p = {p_value:.2g})"


def test_settings_it_does_not_implement_are_refused():
    assert SamplingParams.from_request({"temperature": 0, "presence_penalty": 0.0, "n": 1}, 4).temperature == 0
    with pytest.raises(NotImplementedError, match="presence_penalty"):
        SamplingParams.from_request({"presence_penalty": 0.5}, 4)
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(max_tokens=4, top_p=0)
