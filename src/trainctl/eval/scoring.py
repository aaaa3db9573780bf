"""Scoring with the reward training uses, through the code verl's reward workers run.

verl 0.9.1 scores in its reward loop: each RewardLoopWorker builds its manager with
`verl.trainer.ppo.reward.load_reward_manager(config, tokenizer, reward_router_address=..., reward_model_tokenizer=...)`
(which picks `custom_reward_function` (reward=fn), else verl's `default_compute_score` by data_source (reward=rule),
and the manager class: naive, dapo, or trainctl's own for reward=model on the CPU and reward=judge) and awaits
`manager.run_single(one_sample)` for each response. This module does exactly that, in this process, on the verl
config the training command would write, with one-sample batches shaped as the agent loop leaves them.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

from trainctl.errors import TrainctlError


@dataclass
class Scored:
    reward: float  # verl's reward_score (the score the policy is trained on)
    acc: float  # what verl's validation reports: the reward's `acc` when it returns one, else the score
    extra: dict[str, Any]  # the reward's other keys (verl's reward_extra_info)


class Scorer:
    def __init__(self, verl_cfg: DictConfig, tokenizer):
        from verl.trainer.ppo.reward import load_reward_manager

        if verl_cfg.reward.reward_model.get("enable"):
            # verl's reward-model path serves the model with vLLM/SGLang as a Ray service (GPU engines only); the
            # reward kinds say so before anything loads (RewardKind.eval_problems): this is one set by hand
            raise TrainctlError(
                "eval scores in this process; reward.reward_model.enable=true asks for verl's reward-model servers.",
                hint="score with a reward kind that runs here (reward=model with hardware.rollout_engine=hf)",
            )
        self.tokenizer = tokenizer
        self.manager = load_reward_manager(verl_cfg, tokenizer, reward_router_address=None, reward_model_tokenizer=None)

    def score(self, samples: list[dict]) -> list[Scored]:
        """Each sample: prompt_ids, response_ids, data_source, reward_model, extra_info, raw_prompt, uid (and
        num_turns for a multi-turn trajectory)."""
        items = [self._item(s) for s in samples]

        async def run_all():
            return await asyncio.gather(*(self.manager.run_single(item) for item in items))

        # the manager runs its scorer through its own event loop (verl's get_event_loop at construction)
        results = self.manager.loop.run_until_complete(run_all())
        out = []
        for result in results:
            extra = dict(result.get("reward_extra_info") or {})
            reward = float(result["reward_score"])
            acc = extra.get("acc", reward)
            out.append(Scored(reward, float(acc) if acc is not None else reward, extra))
        return out

    @staticmethod
    def _item(s: dict):
        """One sample as verl's reward loop receives it: prompt and response ids, the attention mask over both, and
        the dataset row's fields (data_source, reward_model, extra_info, raw_prompt)."""
        import numpy as np
        import torch
        from verl import DataProto

        prompt = torch.tensor(s["prompt_ids"], dtype=torch.long)
        response = torch.tensor(s["response_ids"], dtype=torch.long)
        tensors = {
            "prompts": prompt[None],
            "responses": response[None],
            "input_ids": torch.cat([prompt, response])[None],
            "attention_mask": torch.ones((1, len(prompt) + len(response)), dtype=torch.long),
        }

        def column(value):
            arr = np.empty(1, dtype=object)
            arr[0] = value
            return arr

        non_tensors = {
            "data_source": column(s["data_source"]),
            "reward_model": column(s["reward_model"]),
            # the manager adds its own keys to extra_info: each sample gets its own copy
            "extra_info": column(dict(s.get("extra_info") or {})),
            "raw_prompt": column(list(s["raw_prompt"])),
            "uid": column(s.get("uid") or uuid.uuid4().hex),
            # verl's count (user + assistant turns + 1): 2 for a single-turn exchange
            "__num_turns__": column(s.get("num_turns", 2)),
        }
        return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)
