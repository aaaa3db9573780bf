"""`trainctl model init tiny-tools`: the tiny model after an SFT warm start on calculator demonstrations
(trainctl.data.tools, tool_sft rows: 512 questions of arith's `warmup` split). Two in three demonstrations call the
calculator (the question, one hermes call, the calculator's answer, `expr = N\n#### N`); the others answer at once
(`expr = N\n#### N` with no call).

Why a warm start: a random tiny model never writes a tool call, so GRPO with a tool would have nothing to train on.
Why the answers without a call: a model that copied every demonstration's call would leave GRPO nothing to learn
(measured: from a model that always calls, the agent recipe's reward did not move in 16 steps). This one calls in
about two of three samples, and the calculator is what gets the answer right (the tiny model cannot add), so GRPO
learns from its reward to call the calculator: the agent recipe's share of trajectories with a call and its reward
both rise (tests/launch/test_learning.py).

It is plain PyTorch on the demonstrations, with the loss on the assistant turns only (what verl's
MultiTurnSFTDataset masks). It stops on a held-out probe of 32 questions, not at a fixed step: when the copying sets
in varies (measured: 500 to 900 steps), so a fixed step gives a different model on every machine. Once (1) given the
start of a call, the model greedily writes the question's expression for TARGET of the questions and (2) given the
calculator's answer, it writes `#### N` for TARGET of them, it goes on at a tenth of the learning rate until also
(3) it calls for GREEDY_CALLS of the probe questions, greedily (a call's first token has probability over one half:
a greedy chat with it mostly calls the calculator), and (4) it still answers without a call in some samples (the
mean probability of a call is at most CALL_SHARE_MAX).
verl's SFT trainer (`trainctl train algorithm=sft data=arith-tools`) could do the same job, but takes ~10 s a step on
this CPU; tests/data/test_tools.py checks the demonstrations load in verl's SFT dataset.

The warm start of seed 0 (what `trainctl model init tiny-tools` makes) ships with trainctl (SHIPPED: its weights and
how it ended, made here by `python -m trainctl.models.tiny`), with the digest of everything it read: the
base model's weights and tokenizer, its demonstrations and probe questions, and this module's source. `init` copies it
when the digest of what it would read now is the same, and runs the warm start (1-3 minutes on 2 cores) otherwise, for
another seed, or when asked to (`--train`). The same inputs give the same model on one machine (measured: identical
weights from two runs); another CPU's rounding may stop it some steps apart, which is why the model is made once.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# the share of the demonstrations that answer without calling the calculator: room for GRPO to learn to call it
DIRECT_SHARE = 1 / 3
# stop once the probe's copied expressions and final answers are each right for this share of its questions
TARGET = 0.5
# and stop only once it calls greedily for this share of the probe's questions (all of them took hundreds of steps
# more at the lower learning rate: a few questions' call probability hovers about one half)
GREEDY_CALLS = 0.9
# and calls in at most this share of its samples (the mean probability of a call over the probe's
# questions): GRPO learns little from groups that all called
CALL_SHARE_MAX = 0.8
# a cap, for a machine where the copying never comes
MAX_STEPS = 2000
# the first step probed: the copying never set in before step 400 in the warm starts measured (seeds 0-2, two question
# sets), and a probe costs as much as ten steps
FIRST_PROBE = 300
PROBED = 32
# where a call's expression starts in the hermes call the chat template renders
EXPRESSION = '"expression": "'
# the warm start of seed 0, made once: model.safetensors and warm_start.json (the digest of its inputs, how it ended)
SHIPPED = Path(__file__).with_name("shipped") / "tiny-tools"
# what of the base model the warm start reads
BASE_FILES = ("model.safetensors", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "config.json")


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


@dataclass(frozen=True)
class WarmStart:
    """How a warm start ended: its steps, and on the held-out probe questions how many expressions it copied right
    into a call, how many final answers (after the calculator's answer) were right, how many it greedily calls the
    calculator for, and the mean probability of a call."""

    steps: int
    calls_right: int
    answers_right: int
    calls_greedy: int
    call_share: float
    probed: int
    # copied from SHIPPED, not run here
    shipped: bool = False


def render(tokenizer, row: dict, turns: int, generation_prompt: bool) -> str:
    """A demonstration's first `turns` messages as the chat template renders them, with its tools."""
    return tokenizer.apply_chat_template(
        row["messages"][:turns], tools=row["tools"], tokenize=False, add_generation_prompt=generation_prompt
    )


def _left_padded(tokenizer, prompts: list[str]):
    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    try:
        return tokenizer(prompts, return_tensors="pt", padding=True)
    finally:
        tokenizer.padding_side = side


def _greedy(model, tokenizer, prompts: list[str], max_new_tokens: int) -> list[str]:
    batch = _left_padded(tokenizer, prompts)
    out = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    return tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :])


def call_probabilities(model, tokenizer, prompts: list[str]):
    """The probability that the model's answer to each prompt starts a tool call (`<tool_call>`'s first token)."""
    import torch

    first = tokenizer.convert_tokens_to_ids(tokenizer.tokenize("<tool_call>")[0])
    logits = model(**_left_padded(tokenizer, prompts)).logits[:, -1]
    return torch.softmax(logits, dim=-1)[:, first]


def probe(model, tokenizer, rows: list[dict], needed: float = 0.0) -> tuple[int, int | None, int | None, float | None]:
    """Of `rows`' questions (calculator demonstrations): for how many the model, given its call up to the
    expression, greedily writes the question's expression; for how many, given the calculator's answer, it writes
    `#### N`; for how many it greedily starts a call; and the mean probability that it does.

    In that order, and once a count of the first two is under `needed` the rest are not probed (None): the warm start
    goes on training then whatever they would say, and its early probes mostly stop at the first (the answers'
    30 greedy tokens are most of a probe's cost)."""
    import torch

    calls = []
    for row in rows:
        rendered = render(tokenizer, row, 2, False)
        calls.append(rendered[: rendered.index(EXPRESSION) + len(EXPRESSION)])
    model.eval()
    try:
        with torch.no_grad():
            copied = _greedy(model, tokenizer, calls, max_new_tokens=12)
            calls_right = sum(
                call.startswith(json.loads(_call(row)["function"]["arguments"])["expression"] + '"')
                for row, call in zip(rows, copied, strict=True)
            )
            if calls_right < needed:
                return calls_right, None, None, None
            answers = _greedy(model, tokenizer, [render(tokenizer, r, 3, True) for r in rows], max_new_tokens=30)
            answers_right = sum(
                f"#### {row['messages'][2]['content']}" in answer for row, answer in zip(rows, answers, strict=True)
            )
            if answers_right < needed:
                return calls_right, answers_right, None, None
            starts = call_probabilities(model, tokenizer, [render(tokenizer, r, 1, True) for r in rows])
    finally:
        model.train()
    return calls_right, answers_right, int((starts > 0.5).sum()), round(float(starts.mean()), 3)


def _call(row: dict) -> dict:
    """The demonstration's one calculator call."""
    (wanted,) = row["messages"][1]["tool_calls"]
    return wanted


def direct(row: dict) -> dict:
    """The demonstration answered without the calculator: the question, then its final answer."""
    question, *_, answer = row["messages"]
    return {"messages": [question, answer], "tools": row["tools"]}


def warm_start(
    model_dir: Path,
    rows: list[dict],
    probe_rows: list[dict],
    out: Path,
    *,
    target: float = TARGET,
    max_steps: int = MAX_STEPS,
    probe_every: int = 25,
    first_probe: int = FIRST_PROBE,
    lr: float = 3e-3,
    batch: int = 16,
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
) -> WarmStart:
    """SFT on `rows` until, on `probe_rows`' questions (calculator demonstrations), the copied expressions and the
    final answers are each right for `target` of them, then at a tenth of `lr` until it also greedily calls the
    calculator for GREEDY_CALLS of them in at most CALL_SHARE_MAX of its samples (probed every `probe_every` steps
    from `first_probe` on), or `max_steps`; the model goes to `out`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="sdpa", dtype=torch.float32)
    encoded = [encode(tokenizer, r) for r in rows]
    prefix = shared_prefix(encoded)
    # each row after the shared prefix, right-padded (causal attention: padding never reaches an earlier token)
    lengths = torch.tensor([len(ids) - len(prefix) for ids, _ in encoded])
    x = torch.full((len(encoded), int(lengths.max())), tokenizer.pad_token_id)
    m = torch.zeros(x.shape)
    for i, (ids, mask) in enumerate(encoded):
        x[i, : lengths[i]] = torch.tensor(ids[len(prefix) :])
        m[i, : lengths[i]] = torch.tensor(mask[len(prefix) :], dtype=torch.float)
    prefix_ids = torch.tensor([prefix])
    # beta2 0.95 rather than AdamW's 0.999: the model learns to copy the question's numbers into its call after
    # ~450 steps where 0.999 took 700 to more than 1000 (measured over two seeds and two question sets)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    model.train()
    calls = answers = greedy = step = 0
    share = 0.0
    while step < max_steps:
        step += 1
        pick = torch.randint(0, len(encoded), (batch,))
        width = int(lengths[pick].max())
        loss = prefixed_loss(model, prefix_ids, x[pick, :width], m[pick, :width])
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if progress:
            progress(1)
        if (step >= first_probe and step % probe_every == 0) or step == max_steps:
            # the last probe whole: it is what the warm start reports
            needed = 0.0 if step == max_steps else target * len(probe_rows)
            calls, answers, greedy, share = probe(model, tokenizer, probe_rows, needed)
            if greedy is None or min(calls, answers) < target * len(probe_rows):
                continue
            if greedy >= GREEDY_CALLS * len(probe_rows) and share <= CALL_SHARE_MAX:
                break
            # skilled, but its choice to call swings from probe to probe at this learning rate (measured: a mean
            # call probability of 0.2 to 0.8 where the demonstrations call in 2 of 3): settle it at a tenth
            for group in optimizer.param_groups:
                group["lr"] = lr / 10
    shutil.copytree(model_dir, out)
    model.save_pretrained(out, safe_serialization=True)
    return WarmStart(step, calls, answers, greedy, share, len(probe_rows))


def prefixed_loss(model, prefix_ids, ids, mask):
    """The mean loss on the tokens `mask` marks of rows that all start with `prefix_ids` (1 x P) and go on with `ids`
    (B x S, right-padded: causal attention never lets padding reach an earlier token). The prefix's keys and values
    are computed once and shared by the batch, with their gradients: the full forward pass of every row (fp32
    rounding apart) at the cost of one prefix instead of B. ids[:, 0] is predicted by the prefix's last logits, which
    this leaves out: mask[:, 0] must be 0."""
    import torch

    cache = model(input_ids=prefix_ids, use_cache=True).past_key_values
    cache.batch_repeat_interleave(ids.shape[0])
    logits = model(input_ids=ids, past_key_values=cache).logits[:, :-1]
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
    return (nll * mask[:, 1:]).sum() / mask[:, 1:].sum()


def shared_prefix(encoded: list[tuple[list[int], list[int]]]) -> list[int]:
    """The token ids every row starts with. The token after them is predicted from the prefix's last logits, which
    the shared forward pass does not compute: it must not be a trained one (nor may any in the prefix)."""
    first = encoded[0][0]
    n = min(len(ids) for ids, _ in encoded) - 2  # at least two tokens of each row after it
    for ids, _ in encoded:
        n = next((i for i in range(n) if ids[i] != first[i]), n)
    assert not any(any(mask[: n + 1]) for _, mask in encoded), "a trained token in the shared prefix"
    return first[:n]


def probe_rows(seed: int = 0) -> list[dict]:
    """The held-out questions the warm start is probed on (the warmup split's next PROBED after its 512): the ones
    tiny-tools calls the calculator for, greedily."""
    from trainctl.data.tools import arith_rows

    return list(arith_rows("tool_sft", "warmup", 512 + PROBED, seed))[512:]


def inputs_digest(base_dir: Path, rows: list[dict], probe: list[dict]) -> str:
    """The digest of all a warm start reads: the base model's files, the demonstrations, the probe questions and this
    module's source (its steps, learning rates and stopping rule)."""
    digest = hashlib.sha256()
    for name in BASE_FILES:
        digest.update(name.encode() + b"\0" + (base_dir / name).read_bytes())
    digest.update(json.dumps([rows, probe], sort_keys=True).encode())
    digest.update(Path(__file__).read_bytes())
    return digest.hexdigest()


def shipped_record() -> dict | None:
    """What SHIPPED holds: {"inputs": digest, "warm_start": how it ended}; None where it is not there."""
    record = SHIPPED / "warm_start.json"
    return json.loads(record.read_text()) if record.is_file() else None


def demonstrations(seed: int) -> tuple[list[dict], list[dict]]:
    """The warm start's 512 demonstrations (DIRECT_SHARE of them answered without the calculator, a seeded pick) and
    its probe questions."""
    import random

    from trainctl.data.tools import arith_rows

    pick = random.Random(seed)
    rows = [direct(r) if pick.random() < DIRECT_SHARE else r for r in arith_rows("tool_sft", "warmup", 512, seed)]
    return rows, probe_rows(seed)


def init_tiny_tools(
    tokenizer_and_model_dir: Path,
    out: Path,
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
    train: bool = False,
) -> WarmStart:
    """Warm-start the tiny model in `tokenizer_and_model_dir` on calculator demonstrations into `out`: 512 questions
    of arith's `warmup` split, DIRECT_SHARE of them answered without the calculator (a seeded pick), probed on the
    next PROBED (RL trains on the train split, which it never saw). Seed 0's is copied from SHIPPED when it was made
    from the same inputs, unless `train`."""
    import torch

    rows, probe = demonstrations(seed)
    record = shipped_record() if seed == 0 and not train else None
    if record and record["inputs"] == inputs_digest(tokenizer_and_model_dir, rows, probe):
        shutil.copytree(tokenizer_and_model_dir, out)
        shutil.copyfile(SHIPPED / "model.safetensors", out / "model.safetensors")
        return WarmStart(**{**record["warm_start"], "shipped": True})
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # measured faster than 2 threads for this 181k-parameter model on 2 busy cores
    try:
        return warm_start(tokenizer_and_model_dir, rows, probe, out, seed=seed, progress=progress)
    finally:
        torch.set_num_threads(threads)
