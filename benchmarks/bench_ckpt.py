"""Issue 6: merging a world-size-2 FSDP2 checkpoint of a 235M-parameter Qwen2 into a Hugging Face model.

The checkpoint is made by trainctl itself on CPU (one SFT step of a randomly initialised model that uses the tiny
model's tokenizer, 2 ranks). trainctl: `trainctl ckpt merge STEP --dtype bf16 --out DIR`.
Baseline: `python -m verl.model_merger merge --backend fsdp --local_dir STEP --target_dir DIR` (always bf16).
Targets: trainctl's peak RSS at most half of the baseline's; wall time no worse; tensors bit-identical.
BENCH_REPS sets the number of runs of each (default 3, interleaved).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import VENV_BIN, Row, report, reps, timed_rss

TRAINCTL = str(VENV_BIN / "trainctl")
# 16 layers of hidden 1024 / MLP 4096 with the tiny tokenizer's 512-token vocabulary: 235M parameters
ARCH = {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 16, "num_attention_heads": 16,
        "num_key_value_heads": 4, "tie_word_embeddings": False, "layer_types": ["full_attention"] * 16}  # fmt: skip


def make_checkpoint(work: Path, env: dict) -> tuple[Path, int]:
    subprocess.run([TRAINCTL, "model", "init", "tiny"], env=env, cwd=work, check=True, capture_output=True)
    subprocess.run([TRAINCTL, "data", "prep", "arith"], env=env, cwd=work, check=True, capture_output=True)
    code = """
import json, shutil, sys, torch
from pathlib import Path
from transformers import AutoConfig, AutoModelForCausalLM
tiny, out = Path(sys.argv[1]), Path(sys.argv[2])
config = AutoConfig.from_pretrained(tiny)
for k, v in json.loads(sys.argv[3]).items():
    setattr(config, k, v)
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(config)
model.save_pretrained(out)
for f in tiny.iterdir():
    if f.name.startswith(("tokenizer", "chat_template", "generation_config", "special_tokens")):
        shutil.copy(f, out / f.name)
print(sum(p.numel() for p in model.parameters()))
"""
    big = work / "home" / "models" / "big"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(work / "home" / "models" / "tiny"), str(big), json.dumps(ARCH)],
        env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    params = int(proc.stdout.split()[-1])
    train = [TRAINCTL, "train", "recipe=quickstart", f"model.path={big}", "hardware.gpus_per_node=2",
             "run.max_steps=1", "data.train_max_samples=32", "hardware.micro_batch_size_per_gpu=8",
             "data.max_length=128", "run.name=big"]  # fmt: skip
    proc = subprocess.run(train, env=env, cwd=work, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"training the benchmark checkpoint failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return work / "runs" / "big" / "checkpoints" / "global_step_1", params


def identical(a: Path, b: Path) -> bool:
    import torch
    from safetensors import safe_open

    def tensors(folder: Path) -> dict:
        out = {}
        for f in sorted(folder.glob("*.safetensors")):
            h = safe_open(str(f), framework="pt")
            out.update({k: (h, k) for k in h.keys()})  # noqa: SIM118
        return out

    ta, tb = tensors(a), tensors(b)
    if set(ta) != set(tb):
        return False
    for k in ta:
        x, y = ta[k][0].get_tensor(k), tb[k][0].get_tensor(k)
        if x.dtype != y.dtype or x.shape != y.shape or not torch.equal(x.view(torch.int16), y.view(torch.int16)):
            return False
    return True


def main() -> list[Row]:
    n = reps(3)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = {**os.environ, "TRAINCTL_HOME": str(work / "home"), "TRAINCTL_CACHE": str(work / "cache"),
               "WANDB_MODE": "offline"}  # fmt: skip
        step, params = make_checkpoint(work, env)
        shard_gb = sum(f.stat().st_size for f in step.glob("model_world_size_*")) / 1e9
        commands = {
            "trainctl": lambda out: [TRAINCTL, "ckpt", "merge", str(step), "--dtype", "bf16", "--out", str(out)],
            "baseline": lambda out: [sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp",
                                     "--local_dir", str(step), "--target_dir", str(out)],
        }  # fmt: skip
        results: dict[str, list[tuple[float, float]]] = {k: [] for k in commands}
        for i in range(n):
            for name, argv in commands.items():
                out = work / f"{name}-{i}"
                results[name].append(timed_rss(argv(out), env, work))
                print(f"  {name} run {i + 1}: {results[name][-1][0]:.1f}s, {results[name][-1][1]:.0f} MiB", flush=True)
                if i < n - 1:
                    shutil.rmtree(out)
        same = identical(work / f"trainctl-{n - 1}", work / f"baseline-{n - 1}")
    wall = {k: statistics.median(w for w, _ in v) for k, v in results.items()}
    rss = {k: statistics.median(r for _, r in v) for k, v in results.items()}
    rows = [
        Row(
            f"merge {params / 1e6:.0f}M params, 2 FSDP2 shards ({shard_gb:.2f} GB) -> bf16",
            wall["trainctl"],
            wall["baseline"],
            target="wall time no worse than verl.model_merger; bf16 tensors bit-identical",
            ok=wall["trainctl"] <= wall["baseline"] and same,
            note=f"median of {n}; outputs {'bit-identical' if same else 'DIFFER'}",
        ),
        Row(
            "peak RSS (MiB)",
            rss["trainctl"],
            rss["baseline"],
            target="trainctl <= half of verl.model_merger's",
            ok=rss["trainctl"] <= rss["baseline"] / 2,
            note=f"median of {n}, from GNU time -v; trainctl includes reading the output back to verify it",
            kind="overhead",
            unit="MiB",
        ),
    ]
    report("ckpt", rows)
    return rows


if __name__ == "__main__":
    main()
