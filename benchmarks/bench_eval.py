"""Issue 12: CPU generation throughput of `trainctl eval`'s batched sampler against one request at a time.

The tiny model (trainctl.models.tiny), the arith test prompts through its chat template, 64 prompts x 64 new tokens
each (ignore_eos, so every way generates exactly the same number of tokens), greedy. Measured in this process,
median of BENCH_REPS runs (default 3) after a warm-up, the three ways interleaved run by run:
  batched      trainctl.runtime.sampler.generate: all prompts in one continuous batch (what eval and the `hf`
               rollout run);
  one at a time, sampler       the same sampler given one prompt at a time;
  one at a time, transformers  `model.generate(max_new_tokens=64, min_new_tokens=64, do_sample=False)` per prompt.
Reported: tokens/s of each; the ratio is batched / one-at-a-time.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from common import Row, report, reps

# BENCH_EVAL_PROMPTS / BENCH_EVAL_TOKENS shrink it on a busy machine (one at a time is PROMPTS x TOKENS passes)
PROMPTS = int(os.environ.get("BENCH_EVAL_PROMPTS", 64))
NEW_TOKENS = int(os.environ.get("BENCH_EVAL_TOKENS", 64))


def _setup(folder: Path):
    import torch

    from trainctl.data.arith import rows
    from trainctl.models.tiny import init_tiny
    from trainctl.runtime.sampler import load_policy

    torch.manual_seed(0)
    init_tiny(folder)
    model, tok, eos = load_policy(str(folder))
    prompts = [
        tok.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=True, return_dict=False)
        for r in rows("rl", "test", PROMPTS, 0)
    ]
    return model, tok, eos, [list(p) for p in prompts]


def _batched(model, tok, eos, prompts) -> int:
    from trainctl.runtime.sampler import SamplingParams, generate

    params = SamplingParams(max_tokens=NEW_TOKENS, temperature=0, ignore_eos=True)
    out = generate(model, prompts, params, eos, tokenizer=tok, pad_id=tok.pad_token_id or 0)
    return sum(len(c.token_ids) for c in out)


def _sampler_one_at_a_time(model, tok, eos, prompts) -> int:
    from trainctl.runtime.sampler import SamplingParams, generate

    params = SamplingParams(max_tokens=NEW_TOKENS, temperature=0, ignore_eos=True)
    return sum(len(generate(model, [p], params, eos, tokenizer=tok)[0].token_ids) for p in prompts)


def _transformers_one_at_a_time(model, tok, eos, prompts) -> int:
    import torch

    n = 0
    with torch.inference_mode():
        for p in prompts:
            ids = torch.tensor([p])
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS,
                do_sample=False,
                pad_token_id=tok.pad_token_id,
            )
            n += out.shape[1] - ids.shape[1]
    return n


def main() -> list[Row]:
    ways = {
        "batched": _batched,
        "sampler, one at a time": _sampler_one_at_a_time,
        "transformers generate, one at a time": _transformers_one_at_a_time,
    }
    with tempfile.TemporaryDirectory() as tmp:
        setup = _setup(Path(tmp) / "tiny")
        for fn in ways.values():  # warm-up
            fn(*setup)
        rates: dict[str, list[float]] = {k: [] for k in ways}
        for _ in range(reps(3)):
            for name, fn in ways.items():
                t = time.perf_counter()
                tokens = fn(*setup)
                rates[name].append(tokens / (time.perf_counter() - t))
                print(f"  {name}: {rates[name][-1]:.0f} tokens/s", flush=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    n = reps(3)
    rows = [
        Row(f"eval generation, batched vs the sampler one at a time ({PROMPTS} x {NEW_TOKENS} tokens)",
            med["batched"], med["sampler, one at a time"], kind="overhead", unit="tok/s",
            note=f"median of {n}; tokens/s; ratio = batched / one at a time"),
        Row("eval generation, batched vs transformers generate one at a time", med["batched"],
            med["transformers generate, one at a time"], kind="overhead", unit="tok/s",
            note=f"median of {n}; tokens/s; ratio = batched / one at a time"),
    ]  # fmt: skip
    report("eval", rows)
    return rows


if __name__ == "__main__":
    main()
