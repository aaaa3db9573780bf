"""`trainctl model init tiny-tools`: the tiny model after a short SFT warm start on calculator demonstrations
(trainctl.data.tools, tool_sft rows: the arith train split's 512 questions, each with one hermes calculator call, the
calculator's answer and the final answer).

A random tiny model never writes a tool call, so GRPO with a tool would have nothing to train on. This teaches the
hermes call format in ~150 steps (~1 min on 2 cores): plain PyTorch on the demonstrations, with the loss on the
assistant turns only (what verl's MultiTurnSFTDataset masks). verl's SFT trainer (`trainctl train algorithm=sft
data=arith-tools`) does the same job, but takes ~10 s a step on this CPU; tests/data/test_tools.py checks the
demonstrations load in verl's SFT dataset.
"""

from __future__ import annotations

import shutil
from pathlib import Path


def encode(tokenizer, row: dict) -> tuple[list[int], list[int]]:
    """Token ids of a demonstration as the chat template renders it, and a mask of the assistant tokens (after each
    assistant turn's `<|im_start|>assistant\\n`)."""
    ids: list[int] = []
    mask: list[int] = []
    header = len(tokenizer("<|im_start|>assistant\n")["input_ids"])
    rendered = ""
    for i, message in enumerate(row["messages"]):
        text = tokenizer.apply_chat_template(row["messages"][: i + 1], tools=row["tools"], tokenize=False)
        piece = tokenizer(text[len(rendered) :])["input_ids"]
        rendered = text
        ids += piece
        mask += [0] * header + [1] * (len(piece) - header) if message["role"] == "assistant" else [0] * len(piece)
    return ids, mask


def warm_start(
    model_dir: Path, rows: list[dict], out: Path, steps: int = 150, lr: float = 3e-3, batch: int = 16, seed: int = 0
) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="sdpa", dtype=torch.float32)
    encoded = [encode(tokenizer, r) for r in rows]
    length = max(len(ids) for ids, _ in encoded)
    x = torch.full((len(encoded), length), tokenizer.pad_token_id)
    m = torch.zeros((len(encoded), length))
    for i, (ids, mask) in enumerate(encoded):
        x[i, : len(ids)] = torch.tensor(ids)
        m[i, : len(mask)] = torch.tensor(mask, dtype=torch.float)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    for _ in range(steps):
        pick = torch.randint(0, len(encoded), (batch,))
        ids, mask = x[pick], m[pick][:, 1:]
        logits = model(input_ids=ids).logits[:, :-1]
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
        loss = (nll * mask).sum() / mask.sum()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    shutil.copytree(model_dir, out)
    model.save_pretrained(out, safe_serialization=True)
    return out


def init_tiny_tools(tokenizer_and_model_dir: Path, out: Path, seed: int = 0) -> Path:
    """Warm-start the tiny model in `tokenizer_and_model_dir` on the arith calculator demonstrations into `out`."""
    import torch

    from trainctl.data.tools import arith_rows

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # measured faster than 2 threads for this 181k-parameter model on 2 cores
    try:
        rows = list(arith_rows("tool_sft", "train", 512, seed))
        return warm_start(tokenizer_and_model_dir, rows, out, seed=seed)
    finally:
        torch.set_num_threads(threads)
