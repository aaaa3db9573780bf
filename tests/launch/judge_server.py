"""An OpenAI-compatible judge on 127.0.0.1 for the reward=judge runs: the tiny model behind /v1/chat/completions.

Why a server of the tests' own: `transformers serve` installs here (trainctl serves a local judge with it, see
tests/runtime/test_judge.py), but it samples freely and ignores response_format, and a model with random weights then
never writes a verdict: no score would reach the advantages. This server writes the verdict's JSON itself and takes
the scores from the tiny model: each response's mean token log-likelihood under it, spread over [0, 1] within the
group (relative scores, as RULER asks for). It misbehaves on purpose when told to: garbage instead of JSON, or an
answer that comes after the client's timeout. Every judge request is recorded: the responses it showed, its scores.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.openai_server import ChatCompletionsServer

_RESPONSE = re.compile(r'<response id="(\d+)">\n(.*?)\n</response>', re.S)
GARBAGE = "I think they are all fine, really, no numbers from me."


@dataclass
class Judged:
    index: int
    behaviour: str  # ok | garbage | slow
    responses: list[str]
    scores: list[float] | None = None
    answered: bool = False


@dataclass
class JudgeServer(ChatCompletionsServer):
    model_dir: str
    # judge request index (from 0) -> "garbage", "slow" or None (a verdict)
    misbehave: Callable[[int], str | None] = lambda i: None
    slow_s: float = 6.0
    records: list[Judged] = field(default_factory=list)
    probes: int = 0

    def __post_init__(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.tok = AutoTokenizer.from_pretrained(self.model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(self.model_dir).eval()
        self.lock = threading.Lock()
        super().__init__()

    # -- answering ------------------------------------------------------------------------------------------------

    def reply(self, body: dict, headers) -> tuple[int, str]:
        prompt = body["messages"][-1]["content"]
        responses = [text for _, text in sorted(_RESPONSE.findall(prompt), key=lambda m: int(m[0]))]
        if not responses:  # trainctl's probe: any short answer
            with self.lock:
                self.probes += 1
            return 200, "OK"
        with self.lock:
            record = Judged(len(self.records), "", responses)
            record.behaviour = self.misbehave(record.index) or "ok"
            self.records.append(record)
        if record.behaviour == "garbage":
            record.answered = True
            return 200, GARBAGE
        if record.behaviour == "slow":
            time.sleep(self.slow_s)
            return 200, GARBAGE
        verdict, scores = self.verdict(body["messages"], len(responses))
        record.scores, record.answered = scores, True
        return 200, verdict

    def verdict(self, messages: list[dict], n: int) -> tuple[str, list[float]]:
        """{"scores": [{"id": k, "explanation": ..., "score": s_k}, ...]}: the model's mean log-likelihood of each
        response, spread over [0, 1] within the group (the best 1, the worst 0: relative, as RULER asks)."""
        responses = [text for _, text in sorted(_RESPONSE.findall(messages[-1]["content"]), key=lambda m: int(m[0]))]
        enc = self.tok(responses, padding=True, return_tensors="pt", add_special_tokens=False)
        with self.lock, self.torch.inference_mode():
            logits = self.model(**enc).logits[:, :-1].float()
        targets, mask = enc["input_ids"][:, 1:], enc["attention_mask"][:, 1:].float()
        token_lp = logits.log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        mean_lp = ((token_lp * mask).sum(-1) / mask.sum(-1).clamp(min=1)).tolist()
        lo, hi = min(mean_lp), max(mean_lp)
        scores = [round((v - lo) / (hi - lo), 3) if hi > lo else 0.5 for v in mean_lp]
        entries = [{"id": k + 1, "explanation": "mean log-likelihood", "score": s} for k, s in enumerate(scores)]
        return json.dumps({"scores": entries}), scores
