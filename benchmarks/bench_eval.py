"""Issue 12: CPU generation throughput of `trainctl eval`'s batched sampler against one request at a time.

The tiny model (trainctl.models.tiny), the arith test prompts through its chat template, 64 prompts x 64 new tokens
each (ignore_eos, so every way generates exactly the same number of tokens), greedy. Measured in this process,
median of BENCH_REPS runs (default 3) after a warm-up, the three ways interleaved run by run:
  batched      trainctl.runtime.sampler.generate: all prompts in one continuous batch (what eval and the `hf`
               rollout run);
  one at a time, sampler       the same sampler given one prompt at a time;
  one at a time, transformers  `model.generate(max_new_tokens=64, min_new_tokens=64, do_sample=False)` per prompt.
Reported: tokens/s of each; the ratio is batched / one-at-a-time.

Issue 46 (lm-evaluation-harness; BENCH_EVAL_LM=0 skips it), on local arith tasks (BENCH_LM_DOCS questions, default
200: a multiple-choice task of 4 choices each, and a generate task of a quarter as many, 8 tokens at most):
  eval --tasks vs lm_eval's CLI   wall time of `trainctl eval tiny --tasks mc,gen --include-path DIR` and of
               `lm_eval --model hf` with the arguments trainctl prints (the same numbers), median of BENCH_REPS runs
               after a warm-up each, interleaved;
  served loglikelihood            lm-eval's loglikelihood requests per second on the multiple-choice task:
               `local-completions` against `trainctl model serve` (8 concurrent requests, one continuous batch)
               and lm-eval's `hf` model in-process (batch size 1, its default), in this process.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from common import VENV_BIN, Row, interleaved, report, reps

# BENCH_EVAL_PROMPTS / BENCH_EVAL_TOKENS shrink it on a busy machine (one at a time is PROMPTS x TOKENS passes)
PROMPTS = int(os.environ.get("BENCH_EVAL_PROMPTS", 64))
NEW_TOKENS = int(os.environ.get("BENCH_EVAL_TOKENS", 64))
LM_DOCS = int(os.environ.get("BENCH_LM_DOCS", 200))


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


def _lm_tasks(folder: Path) -> None:
    """The multiple-choice and generate tasks of tests/eval/lm_tasks, on LM_DOCS arith questions."""
    import json
    import random

    from trainctl.data.arith import problems

    folder.mkdir(parents=True)
    rng = random.Random(0)
    mc, gen = [], []
    for p in problems(LM_DOCS, 0, "test"):
        choices = [p.answer, *sorted({p.answer + d for d in (-10, -1, 1, 10)} - {p.answer})[:3]]
        rng.shuffle(choices)
        mc.append({"question": p.question, "choices": [str(c) for c in choices], "label": choices.index(p.answer)})
        gen.append({"question": p.question, "answer": str(p.answer)})
    common = {"dataset_path": "json", "test_split": "test", "doc_to_text": "Question: {{question}}\nAnswer:"}
    tasks = {
        "bench_mc": (mc, {"output_type": "multiple_choice", "doc_to_choice": "choices", "doc_to_target": "label",
                          "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}]}),
        "bench_gen": (gen[: LM_DOCS // 4], {"output_type": "generate_until", "doc_to_target": " {{answer}}",
                      "generation_kwargs": {"until": ["\n"], "max_gen_toks": 8, "do_sample": False},
                      "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True}]}),
    }  # fmt: skip
    for name, (docs, spec) in tasks.items():
        data = folder / f"{name}.jsonl"
        data.write_text("".join(json.dumps(d) + "\n" for d in docs))
        config = {"task": name, **common, "dataset_kwargs": {"data_files": {"test": str(data)}}, **spec}
        (folder / f"{name}.yaml").write_text(json.dumps(config))  # JSON is YAML


def _lm_eval_rows(root: Path, model: Path, n: int) -> list[Row]:
    import subprocess

    tasks = root / "lm_tasks"
    _lm_tasks(tasks)
    env = {**os.environ, "TRAINCTL_HOME": str(root / "home"), "TRAINCTL_CACHE": str(root / "cache"),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(root / "datasets"),
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}  # fmt: skip
    python = str(VENV_BIN / "python")
    ours = [python, "-m", "trainctl", "eval", str(model), "--tasks", "bench_mc,bench_gen", "--include-path",
            str(tasks), "--out", str(root / "eval")]  # fmt: skip
    said = subprocess.run(ours, env=env, capture_output=True, text=True, check=True).stderr
    command = next(line for line in said.splitlines() if line.startswith("The same with lm-eval's CLI: "))
    theirs = [python, "-m", "lm_eval", *command.split(": ", 1)[1].split()[1:]]
    wall = interleaved({"trainctl": (ours, 0), "lm_eval": (theirs, 0)}, env, root, n)

    # loglikelihood requests/s: lm-eval through model serve, and lm-eval's hf model in this process (its datasets
    # cache in the temporary folder: `datasets` reads HF_DATASETS_CACHE when imported, perhaps earlier in this process)
    import time

    os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_CACHE=str(root / "datasets"))
    import datasets.config
    import lm_eval
    from lm_eval.tasks import TaskManager

    from trainctl.inference.model import prepare
    from trainctl.inference.server import open_server

    datasets.config.HF_DATASETS_CACHE = root / "datasets"
    manager = TaskManager(include_path=str(tasks), include_defaults=False)
    server = open_server(prepare(str(model), []), "127.0.0.1", 0, None)
    server.start()
    served_args = {"base_url": f"{server.url}/completions", "model": "tiny", "tokenizer_backend": "huggingface",
                   "tokenizer": str(model), "num_concurrent": 8}  # fmt: skip
    ways = {"served": ("local-completions", served_args), "hf": ("hf", {"pretrained": str(model), "dtype": "float32"})}
    rates: dict[str, list[float]] = {k: [] for k in ways}
    accuracy: dict[str, float] = {}
    try:
        for rep in range(n + 1):
            for name, (lm, args) in ways.items():
                t = time.perf_counter()
                out = lm_eval.simple_evaluate(model=lm, model_args=args, tasks=["bench_mc"], task_manager=manager,
                                              device="cpu" if lm == "hf" else None)  # fmt: skip
                seconds = time.perf_counter() - t
                accuracy[name] = out["results"]["bench_mc"]["acc,none"]
                if rep:  # the first of each warms up
                    rates[name].append(4 * LM_DOCS / seconds)
                    print(f"  loglikelihood, {name}: {rates[name][-1]:.0f} requests/s", flush=True)
    finally:
        server.stop()
    served, hf = (statistics.median(rates[k]) for k in ("served", "hf"))
    return [
        Row(f"eval --tasks vs lm_eval's CLI ({LM_DOCS} + {LM_DOCS // 4} local questions, tiny model)", wall["trainctl"],
            wall["lm_eval"], kind="speedup", note=f"median of {n}; the same numbers; ratio = lm_eval / trainctl"),
        Row(f"lm-eval loglikelihood: local-completions via model serve vs hf in-process ({4 * LM_DOCS} requests)",
            served, hf, kind="overhead", unit="req/s",
            note=f"median of {n}; requests/s; ratio = served / hf; acc {accuracy['served']:.4f} served, "
            f"{accuracy['hf']:.4f} hf"),
    ]  # fmt: skip


def main() -> list[Row]:
    ways = {
        "batched": _batched,
        "sampler, one at a time": _sampler_one_at_a_time,
        "transformers generate, one at a time": _transformers_one_at_a_time,
    }
    lm_rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        setup = _setup(Path(tmp) / "tiny")
        if os.environ.get("BENCH_EVAL_LM", "1") != "0":
            lm_rows = _lm_eval_rows(Path(tmp), Path(tmp) / "tiny", reps(3))
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
        *lm_rows,
    ]  # fmt: skip
    report("eval", rows)
    return rows


if __name__ == "__main__":
    main()
