"""Issue 16 (GPU machines only): GRPO with the vLLM rollout, `trainctl train` against the same config run by raw
`python -m verl.trainer.main_ppo` (the raw command trainctl writes into command.sh), on one GPU, same session.

Measures verl's own `perf/throughput` (tokens per second per GPU) at steps 2..N of each run (step 1 includes vLLM's
start-up) and reports the medians and their ratio (target: trainctl/raw >= 0.95: trainctl adds nothing to a step).
Run: python benchmarks/bench_gpu.py (needs CUDA and vLLM; `BENCH_STEPS` sets N, default 5).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, Row, report

sys.path.insert(0, str(ROOT))
STEPS = int(os.environ.get("BENCH_STEPS", 5))
REWARD = ROOT / "tests" / "launch" / "partial_reward.py"


def _throughputs(path: Path) -> list[float]:
    values = {}
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if "perf/throughput" in rec["data"]:
            values[rec["step"]] = rec["data"]["perf/throughput"]
    return [values[s] for s in sorted(values) if s >= 2]


def main() -> list[Row]:
    import torch

    if not torch.cuda.is_available():
        print("bench_gpu: no CUDA GPU here; nothing measured")
        return []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        home = work / "home"
        env = {**os.environ, "TRAINCTL_HOME": str(home), "TRAINCTL_CACHE": str(work / "cache")}
        for var in ("WANDB_API_KEY", "RAY_ADDRESS"):
            env.pop(var, None)
        os.environ.update(TRAINCTL_HOME=env["TRAINCTL_HOME"], TRAINCTL_CACHE=env["TRAINCTL_CACHE"])
        from tests.gpu.conftest import MID_ARCH

        from trainctl.data.arith import rows
        from trainctl.data.writer import write_rows
        from trainctl.models.tiny import build_model, build_tokenizer

        tok = build_tokenizer()
        mid = home / "models" / "mid"
        tok.save_pretrained(mid)
        build_model(tok, seed=1, arch=MID_ARCH).save_pretrained(mid, safe_serialization=True)
        for split, n in (("train", 512), ("test", 64)):
            write_rows(home / "data" / "arith" / "rl" / f"{split}.parquet", rows("rl", split, n, 0))

        args = [
            "recipe=grpo-arith-tiny-cpu",
            "hardware=1gpu",
            "hardware.attn_implementation=sdpa",
            f"model.path={mid}",
            f"run.max_steps={STEPS}",
            "reward=fn",
            f"reward.fn={REWARD}:compute_score",
            "hardware.gpu_memory_utilization=0.35",
            "actor_rollout_ref.rollout.enforce_eager=true",
        ]
        from trainctl.launch.runner import full_command
        from trainctl.plan import make_plan

        plan = make_plan([*args, f"run.dir={work}/raw"], native=False)
        command = full_command(plan)
        raw_metrics = work / "raw.jsonl"
        raw_env = {**env, **command.env, "VERL_FILE_LOGGER_PATH": str(raw_metrics)}
        raw_env.pop("TRAINCTL_METRICS_PATH", None)

        if os.environ.get("BENCH_RAW_ONLY"):
            # device time is scarce: the raw half alone, to compare with trainctl's run of the same config
            # measured earlier in the session (tests/gpu's GRPO test reports its tokens/s)
            raw = subprocess.run(command.raw_argv, env=raw_env, cwd=work, capture_output=True, text=True)
            if raw.returncode:
                raise RuntimeError(raw.stdout[-3000:] + raw.stderr[-3000:])
            print("raw main_ppo perf/throughput at steps >= 2:", _throughputs(raw_metrics))
            return []
        t = time.perf_counter()
        ours = subprocess.run(
            [sys.executable, "-m", "trainctl", "train", *args, "run.name=bench"],
            env=env,
            cwd=work,
            capture_output=True,
            text=True,
        )
        t_ours = time.perf_counter() - t
        if ours.returncode:
            raise RuntimeError(ours.stdout[-3000:] + ours.stderr[-3000:])
        shutil.rmtree(work / "raw", ignore_errors=True)
        (work / "raw").mkdir()
        t = time.perf_counter()
        raw = subprocess.run(command.raw_argv, env=raw_env, cwd=work, capture_output=True, text=True)
        t_raw = time.perf_counter() - t
        if raw.returncode:
            raise RuntimeError(raw.stdout[-3000:] + raw.stderr[-3000:])

        mine = _throughputs(work / "runs" / "bench" / "metrics" / "attempt-1.jsonl")
        theirs = _throughputs(raw_metrics)
        m, r = statistics.median(mine), statistics.median(theirs)
        rows = [
            Row(
                f"GRPO tokens/s per GPU, vLLM rollout, median of steps 2-{STEPS}",
                m,
                r,
                target="trainctl/raw >= 0.95",
                ok=m / r >= 0.95,
                kind="overhead",
                unit="tokens/s",
                note=f"trainctl {[round(x) for x in mine]}, raw {[round(x) for x in theirs]}; "
                f"wall: trainctl {t_ours:.0f} s (validation included), raw {t_raw:.0f} s",
            )
        ]
    report("gpu", rows)
    return rows


if __name__ == "__main__":
    main()
