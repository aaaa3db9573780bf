"""reward=model on the CPU: a verl reward manager that scores each response with a transformers
AutoModelForSequenceClassification loaded inside the reward worker.

verl 0.9.1's reward-model path (`reward.reward_model.enable`) serves the model with the rollout engine and reads
vLLM's /classify or SGLang's embeddings endpoint; no CPU engine exists. This manager is the smallest real stand-in on
trainctl's CPU platform: verl loads it with importlib (`reward.reward_manager.source=importlib`), one per reward
worker, and calls `run_single` for each response as it finishes. It builds the text verl's reward-model path builds
(the prompt's messages plus the response, through the reward model's chat template) and batches the requests that
arrive together into forward passes of `reward.micro_batch_size`.

The class verl loads is built on first access (module __getattr__), so importing this module for its scorer does
not import verl.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from trainctl.runtime.lazy import lazy_classes

MANAGER = "SequenceClassifierRewardManager"


def response_text(item: Any, tokenizer: Any) -> str:
    """A sample's response as text, without padding or special tokens (as verl's rollout dump writes it)."""
    response_ids = item.batch["responses"]
    length = int(item.batch["attention_mask"][-response_ids.shape[-1] :].sum())
    return tokenizer.decode(response_ids[:length], skip_special_tokens=True)


def prompt_messages(item: Any) -> list[dict]:
    """The prompt's chat messages (verl keeps them as `raw_prompt`)."""
    return [dict(m) for m in item.non_tensor_batch["raw_prompt"]]


class SequenceScorer:
    """A sequence classifier with one label, scoring conversations in micro batches (the logit is the reward)."""

    def __init__(self, path: str, micro_batch_size: int = 8, max_length: int | None = None):
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForSequenceClassification.from_pretrained(path, dtype="auto")
        self.model.eval()
        if self.model.config.num_labels != 1:
            raise ValueError(f"{path} has {self.model.config.num_labels} labels; a reward model has one")
        if self.model.config.pad_token_id is None:
            # the classifier reads the last token that is not padding: it must know the padding id
            self.model.config.pad_token_id = self.tokenizer.pad_token_id or self.tokenizer.eos_token_id
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.tokenizer.truncation_side = "left"  # keep the response: the score is read at the end
        self.micro_batch_size = micro_batch_size
        self.max_length = max_length
        self._torch = torch
        self._lock = threading.Lock()
        self._pending: list[tuple[str, asyncio.Future]] = []
        self._drainer: asyncio.Task | None = None

    def text(self, messages: Sequence[dict], response: str) -> str:
        """What the reward model reads: the conversation with the response, through its chat template."""
        chat = [*messages, {"role": "assistant", "content": response}]
        return self.tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=False)

    def forward(self, texts: list[str]) -> list[float]:
        """One forward pass (the chat template already holds the special tokens: none are added)."""
        enc = self.tokenizer(
            texts,
            add_special_tokens=False,
            padding=True,
            truncation=self.max_length is not None,
            max_length=self.max_length,
            return_tensors="pt",
        )
        with self._lock, self._torch.inference_mode():
            logits = self.model(**enc).logits
        return [float(x) for x in logits[:, 0].float()]

    def score_texts(self, texts: list[str]) -> list[float]:
        out: list[float] = []
        for i in range(0, len(texts), self.micro_batch_size):
            out += self.forward(texts[i : i + self.micro_batch_size])
        return out

    async def score(self, text: str) -> float:
        """Score one text; texts submitted while a pass runs are batched into the next ones."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._pending.append((text, future))
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.ensure_future(self._drain())
        return await future

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0)  # let the requests that arrived together queue up
        while self._pending:
            batch = self._pending[: self.micro_batch_size]
            del self._pending[: len(batch)]
            try:
                # off the event loop: the reward worker keeps answering while the model runs
                scores = await loop.run_in_executor(None, self.forward, [t for t, _ in batch])
            except Exception as e:  # a broken reward model is a real error: every waiting request gets it
                for _, f in batch:
                    if not f.done():
                        f.set_exception(e)
                continue
            for (_, f), s in zip(batch, scores, strict=True):
                if not f.done():
                    f.set_result(s)


def _manager_class():
    from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

    class SequenceClassifierRewardManager(RewardManagerBase):
        """verl reward manager: the reward model's logit for the prompt and response is the reward."""

        def __init__(self, config, tokenizer, compute_score, reward_router_address=None, reward_model_tokenizer=None):
            super().__init__(config, tokenizer, compute_score)
            settings = config.reward.reward_kwargs.trainctl
            self.scorer = SequenceScorer(
                settings.model_path, int(settings.micro_batch_size), settings.get("max_length")
            )

        async def run_single(self, data) -> dict:
            item = data[-1:][0]  # a multi-turn trajectory is scored on its last sequence, as verl does
            response = await self.loop.run_in_executor(None, response_text, item, self.tokenizer)
            score = await self.scorer.score(self.scorer.text(prompt_messages(item), response))
            return {"reward_score": score, "reward_extra_info": {}}

    return SequenceClassifierRewardManager


# verl loads the manager by module and name (reward.reward_manager.source=importlib): built on first access
__getattr__ = lazy_classes(__name__, {MANAGER: _manager_class})
