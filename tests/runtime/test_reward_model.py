"""trainctl.runtime.reward_model: the tiny reward model scoring conversations, as the reward manager verl loads does
(tests/launch/test_reward.py trains with it for real; tests/runtime/test_lazy.py loads the manager class)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
import torch

from trainctl.runtime.reward_model import SequenceScorer, prompt_messages, response_text

MESSAGES = [{"role": "user", "content": "What is 2 + 3?"}]


@pytest.fixture(scope="module")
def scorer(tiny_reward_model_dir):
    return SequenceScorer(str(tiny_reward_model_dir), micro_batch_size=2)


def test_the_text_is_the_conversation_through_the_chat_template(scorer):
    text = scorer.text(MESSAGES, "5")
    assert text == scorer.tokenizer.apply_chat_template(
        [*MESSAGES, {"role": "assistant", "content": "5"}], tokenize=False
    )
    assert text.index("What is 2 + 3?") < text.rindex("5")


def test_micro_batches_and_padding_do_not_change_a_score(scorer):
    texts = [scorer.text(MESSAGES, answer) for answer in ("5", "it is five, of course", "6", "")]
    one_by_one = [scorer.forward([t])[0] for t in texts]
    batched = scorer.score_texts(texts)  # two passes of two, each padded to its longest
    assert batched == pytest.approx(one_by_one, abs=1e-4)
    assert len(set(round(s, 4) for s in batched)) > 1  # the scores depend on the text


def test_concurrent_requests_are_batched_and_each_gets_its_own_score(scorer):
    texts = [scorer.text(MESSAGES, str(n)) for n in range(5)]
    passes = []
    forward = scorer.forward

    def counting(batch):
        passes.append(len(batch))
        return forward(batch)

    scorer.forward = counting
    try:

        async def all_at_once():
            return await asyncio.gather(*(scorer.score(t) for t in texts))

        scores = asyncio.run(all_at_once())
    finally:
        del scorer.forward
    assert passes == [2, 2, 1]  # five requests that arrived together, in micro batches of two
    assert scores == pytest.approx(scorer.score_texts(texts), abs=1e-4)


def test_a_failing_pass_fails_every_request_waiting_on_it(scorer):
    def broken(batch):
        raise RuntimeError("out of memory")

    scorer.forward = broken
    try:

        async def two():
            return await asyncio.gather(scorer.score("a"), scorer.score("b"), return_exceptions=True)

        results = asyncio.run(two())
    finally:
        del scorer.forward
    assert [str(r) for r in results] == ["out of memory", "out of memory"]


def test_a_model_with_more_than_one_label_is_not_a_reward_model(tiny_reward_model_dir, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    two = tmp_path / "two-labels"
    model = AutoModelForSequenceClassification.from_pretrained(
        tiny_reward_model_dir, num_labels=2, ignore_mismatched_sizes=True
    )
    model.save_pretrained(two)
    AutoTokenizer.from_pretrained(tiny_reward_model_dir).save_pretrained(two)
    with pytest.raises(ValueError, match="has 2 labels; a reward model has one"):
        SequenceScorer(str(two))


def test_what_the_manager_reads_from_a_verl_sample(scorer):
    ids = scorer.tokenizer("5 apples", add_special_tokens=False)["input_ids"]
    pad = scorer.tokenizer.pad_token_id
    responses = torch.tensor([*ids, pad, pad])
    prompt_mask = torch.ones(3, dtype=torch.long)
    mask = torch.cat([prompt_mask, torch.tensor([1] * len(ids) + [0, 0])])
    item = SimpleNamespace(
        batch={"responses": responses, "attention_mask": mask},
        non_tensor_batch={"raw_prompt": MESSAGES},
    )
    assert response_text(item, scorer.tokenizer) == "5 apples"
    assert prompt_messages(item) == MESSAGES
