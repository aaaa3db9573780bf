"""`model serve`'s log-probs in the OpenAI API's shapes (vLLM's): /v1/completions with `logprobs` and `echo`, and
/v1/chat/completions with `logprobs`/`top_logprobs`, through the official `openai` client and as raw server-sent
events; every number checked against the model's own forward pass over the whole sequence, computed here."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from tests.inference.conftest import served_here


def _post(url: str, body: dict) -> tuple[int, dict | list[dict]]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            raw = r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
    if body.get("stream"):
        return 200, [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
    return 200, json.loads(raw)


def likeliest_pairs(topk) -> tuple[list[int], list[float]]:
    return topk.indices.tolist(), topk.values.tolist()


class Reference:
    """The tiny model run the slow and obvious way: the whole sequence through it, no cache, no padding."""

    def __init__(self, folder):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(folder)

    def logps(self, ids: list[int]):
        """log_softmax of the logits at every position: [positions, vocab] (row j predicts token j + 1)."""
        import torch

        with torch.inference_mode():
            return self.model(torch.tensor([ids])).logits[0].float().log_softmax(-1)

    def greedy(self, ids: list[int], n: int) -> list[int]:
        """n greedy tokens after ids, up to and with the EOS."""
        out: list[int] = []
        while len(out) < n and (not out or out[-1] != self.tokenizer.eos_token_id):
            out.append(int(self.logps(ids + out)[-1].argmax()))
        return out


@pytest.fixture(scope="module")
def reference(tiny_model_dir) -> Reference:
    return Reference(tiny_model_dir)


def test_completions_echo_the_prompts_log_probs_and_the_answers(tiny_model_dir, reference):
    from openai import OpenAI

    tokenizer = reference.tokenizer
    prompt = "What is 26 + 38? Answer:"
    ids = tokenizer.encode(prompt)
    answer = reference.greedy(ids, 4)
    whole = reference.logps(ids + answer)
    with served_here(str(tiny_model_dir)) as server:
        client = OpenAI(base_url=server.url, api_key="unused")
        done = client.completions.create(
            model="tiny", prompt=prompt, max_tokens=4, temperature=0, logprobs=3, echo=True
        )
        choice = done.choices[0]
        lp = choice.logprobs
        assert done.usage.completion_tokens == len(answer) and len(lp.tokens) == len(ids) + len(answer)
        assert lp.tokens == [tokenizer.decode([t]) for t in ids + answer]
        # the prompt: the first token has nothing before it; each other's is log p(token | the ones before)
        assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
        for j in range(1, len(ids)):
            assert lp.token_logprobs[j] == pytest.approx(float(whole[j - 1, ids[j]]), abs=1e-4)
            likeliest = whole[j - 1].topk(3)
            top = lp.top_logprobs[j]
            # the chosen token and the 3 likeliest, the chosen first; tokens of one text (bytes of a character
            # decoded alone) share an entry: the likelier's
            expected: dict[str, float] = {}
            for t, v in [(ids[j], float(whole[j - 1, ids[j]])), *zip(*likeliest_pairs(likeliest), strict=True)]:
                expected[tokenizer.decode([t])] = max(expected.get(tokenizer.decode([t]), -1e9), v)
            assert next(iter(top)) == lp.tokens[j] and list(top) == list(expected)
            assert list(top.values()) == pytest.approx(list(expected.values()), abs=1e-4)
        # the answer, greedily: each token the likeliest, with its log-prob given the prompt and the tokens before
        for j, t in enumerate(answer):
            assert lp.token_logprobs[len(ids) + j] == pytest.approx(float(whole[len(ids) + j - 1, t]), abs=1e-4)
            assert lp.token_logprobs[len(ids) + j] == max(lp.top_logprobs[len(ids) + j].values())
        # the prompt as token ids: the same answer
        status, raw = _post(f"{server.url}/completions", {"prompt": ids, "max_tokens": 4, "temperature": 0,
                                                          "logprobs": 3, "echo": True})  # fmt: skip
        assert status == 200 and raw["choices"][0]["logprobs"] == lp.model_dump()
        # tokens are the text, piece by piece; text_offset counts them
        assert "".join(lp.tokens).startswith(prompt)
        assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]

        # what lm-eval's local-completions sends for a loglikelihood: token ids, max_tokens 1, logprobs 1, echo
        status, ll = _post(f"{server.url}/completions", {"prompt": [ids, ids[:5]], "max_tokens": 1, "logprobs": 1,
                                                         "echo": True, "temperature": 0})  # fmt: skip
        assert status == 200 and [len(c["logprobs"]["tokens"]) for c in ll["choices"]] == [len(ids) + 1, 6]
        assert ll["choices"][0]["logprobs"]["token_logprobs"][: len(ids)] == lp.token_logprobs[: len(ids)]

        # max_tokens 0 with echo: the prompt scored, nothing generated
        status, only = _post(f"{server.url}/completions", {"prompt": prompt, "max_tokens": 0, "logprobs": 0,
                                                           "echo": True})  # fmt: skip
        assert status == 200 and only["choices"][0]["text"] == prompt, only
        assert only["usage"]["completion_tokens"] == 0 and only["choices"][0]["finish_reason"] == "length"
        assert only["choices"][0]["logprobs"]["token_logprobs"] == lp.token_logprobs[: len(ids)]
        assert all(len(t) == 1 for t in only["choices"][0]["logprobs"]["top_logprobs"][1:])  # the chosen only

        # streamed: the same tokens and numbers, chunk by chunk (the echoed prompt first)
        status, chunks = _post(f"{server.url}/completions", {"prompt": prompt, "max_tokens": 4, "temperature": 0,
                                                             "logprobs": 3, "echo": True, "stream": True})  # fmt: skip
        parts = [c["choices"][0]["logprobs"] for c in chunks if c["choices"] and c["choices"][0]["logprobs"]]
        assert status == 200 and parts[0]["tokens"] == lp.tokens[: len(ids)]
        for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
            assert [x for p in parts for x in p[key]] == getattr(lp, key), key
        assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == choice.text

        # without echo: the answer's tokens only
        plain = client.completions.create(model="tiny", prompt=prompt, max_tokens=4, temperature=0, logprobs=0)
        assert plain.choices[0].logprobs.token_logprobs == lp.token_logprobs[len(ids) :]

        # refused, with OpenAI's error shape
        for body, param in (({"logprobs": 21}, "logprobs"), ({"logprobs": "3"}, "logprobs"), ({"max_tokens": 0},
                            "max_tokens")):  # fmt: skip
            status, error = _post(f"{server.url}/completions", {"prompt": prompt, **body})
            assert status == 400 and error["error"]["param"] == param, error


def test_chat_log_probs_are_the_answers_with_the_likeliest_tokens(tiny_model_dir, reference):
    from openai import OpenAI

    messages = [{"role": "user", "content": "What is 2 + 3?"}]
    with served_here(str(tiny_model_dir)) as server:
        prompt = server.service.prompter.prompt_ids(messages, None, {})
        answer = reference.greedy(prompt, 5)
        full = reference.logps(prompt + answer)
        client = OpenAI(base_url=server.url, api_key="unused")
        r = client.chat.completions.create(
            model="tiny", messages=messages, max_tokens=5, temperature=0, logprobs=True, top_logprobs=2
        )
        content = r.choices[0].logprobs.content
        assert [c.token for c in content] == [reference.tokenizer.decode([t]) for t in answer]
        for j, c in enumerate(content):
            expected = full[len(prompt) + j - 1]
            assert c.logprob == pytest.approx(float(expected[answer[j]]), abs=1e-4)
            assert bytes(c.bytes).decode() == c.token
            likeliest = expected.topk(2)
            assert [t.logprob for t in c.top_logprobs] == pytest.approx(likeliest.values.tolist(), abs=1e-4)
            assert c.top_logprobs[0].token == c.token  # greedy: the chosen token is the likeliest
        # streamed: the same entries, chunk by chunk
        chunks = list(client.chat.completions.create(model="tiny", messages=messages, max_tokens=5, temperature=0,
                                                     logprobs=True, top_logprobs=2, stream=True))  # fmt: skip
        streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
        assert [e.model_dump() for e in streamed] == [e.model_dump() for e in content]
        # logprobs without top_logprobs: the chosen token's, no alternatives
        r = client.chat.completions.create(model="tiny", messages=messages, max_tokens=5, temperature=0, logprobs=True)
        assert [c.logprob for c in r.choices[0].logprobs.content] == [c.logprob for c in content]
        assert all(c.top_logprobs == [] for c in r.choices[0].logprobs.content)
        # none asked for: none given
        assert client.chat.completions.create(model="tiny", messages=messages, max_tokens=2).choices[0].logprobs is None
        status, error = _post(f"{server.url}/chat/completions", {"messages": messages, "top_logprobs": 2})
        assert status == 400 and "'top_logprobs' needs 'logprobs': true" in error["error"]["message"]
