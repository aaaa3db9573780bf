"""The row formats each trainer reads, and the parquet schemas that carry them.

rl   verl's RLHFDataset: data_source, prompt (chat messages), ability, reward_model {style, ground_truth}, extra_info
sft  verl 0.9.1's MultiTurnSFTDataset: messages (it reads nothing else)
dpo  TRL's DPOTrainer, conversational: prompt (messages), chosen and rejected (assistant messages)
"""

from __future__ import annotations

FORMATS = ("rl", "sft", "dpo")


def message(role: str, content: str) -> dict:
    return {"role": role, "content": content}


def rl_row(data_source: str, prompt: str, ground_truth: str, ability: str = "math", extra_info: dict | None = None):
    return {
        "data_source": data_source,
        "prompt": [message("user", prompt)],
        "ability": ability,
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": dict(extra_info or {}),
    }


def sft_row(prompt: str, response: str) -> dict:
    return {"messages": [message("user", prompt), message("assistant", response)]}


def dpo_row(prompt: str, chosen: str, rejected: str) -> dict:
    return {
        "prompt": [message("user", prompt)],
        "chosen": [message("assistant", chosen)],
        "rejected": [message("assistant", rejected)],
    }
