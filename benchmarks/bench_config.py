"""Issues 2, 15 and 54: how fast trainctl answers, against raw verl's time to its first error and an older checkout.

Issue 54, against 7cbd8d3 (BENCH_BASELINE_SRC=<its src>, from `git worktree add /tmp/base-7cbd8d3 7cbd8d3`:
PYTHONPATH puts its source first; without it, the issue's figures for 7cbd8d3 stand in), run by run interleaved,
in a home where `trainctl model init tiny` and `trainctl data prep arith` ran once: `trainctl --help` <= 0.1 s;
`config validate` with a key typo (exit 1, the key named, `lr` suggested) <= 0.3 s; the issue's full --dry-run
(grpo, qwen2.5-7b, gsm8k, 8gpu) twice: of a config validated before (verl's verdict kept, no verl imported), and as
the first of its config (its verdict removed before each run: verl imported for its validation).

Issue 2: an unknown key or a batch-arithmetic error <= 1.0 s and at least 6x faster than
`python -m verl.trainer.main_ppo` reporting the same. Issue 15: a full --dry-run (verl's own validation included) at
most half of raw verl's time to its first error; not met: importing the modules verl's validation lives in takes most
of raw verl's time. The floor, with the model present as here: verl's model check (HFModelConfig) needs
`transformers.AutoConfig` and `AutoTokenizer`, and verl's config dataclasses import torch, tensordict and ray with
verl itself: ~5 s of CPU on this machine, before trainctl's own ~0.3 s.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from common import VENV_BIN, Row, baseline_src, interleaved, report, reps

TRAINCTL = str(VENV_BIN / "trainctl")
PYTHON = str(VENV_BIN / "python")
RAW_PPO = [PYTHON, "-m", "verl.trainer.main_ppo"]

# the same batch mistake, written for trainctl and for raw verl (100 prompts x 5 samples over 16 GPUs)
BATCH_TRAINCTL = [
    "algorithm=grpo",
    "hardware=2x8gpu",
    "hardware.ray_address=auto",
    "data.train_batch_size=100",
    "actor_rollout_ref.actor.ppo_mini_batch_size=50",
]
BATCH_RAW = [
    "algorithm.adv_estimator=grpo",
    "data.train_batch_size=100",
    "actor_rollout_ref.rollout.n=5",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.actor.ppo_mini_batch_size=50",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
    "trainer.nnodes=2",
    "trainer.n_gpus_per_node=8",
]

# the arith data's 512 rows hold one step of 512 prompts
FULL_TINY = ["algorithm=grpo", "model=tiny", "hardware=8gpu", "data.train_batch_size=512"]

# issue 54's commands, and its figures for 7cbd8d3 (quiet 2-core machine) when no baseline checkout is given
TYPO = ["config", "validate", "algorithm=grpo", "actor_rollout_ref.actor.optim.lrr=1"]
DRY_RUN = ["train", "algorithm=grpo", "model=qwen2.5-7b", "data=gsm8k", "hardware=8gpu", "--dry-run"]
ISSUE = {"help": 0.131, "typo": 0.645, "dry_run": 7.46}


def _first_of_its_config(argv: list[str]) -> list[str]:
    """The command, after removing every verdict of verl's validation (trainctl.checks.native)."""
    return ["sh", "-c", 'rm -rf "$TRAINCTL_CACHE/validated" && exec "$0" "$@"', *argv]


def _against_baseline(label: str, argv: list[str], expect: int, env: dict, work: Path, n: int, base) -> tuple:
    """(trainctl's median, the baseline's), run by run interleaved; the issue's figure without a checkout."""
    commands = {"trainctl": (argv, expect, env)}
    if base is not None:
        commands["baseline"] = (argv, expect, {**env, "PYTHONPATH": str(base)})
    found = interleaved(commands, env, work, n)
    return found["trainctl"], found.get("baseline", ISSUE[label])


def main() -> list[Row]:
    n = reps()
    base = baseline_src()
    base_note = f"baseline: {base}" if base else "baseline: issue 54's figure for 7cbd8d3"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = {**os.environ, "TRAINCTL_HOME": str(work / "home"), "TRAINCTL_CACHE": str(work / "cache")}
        env.pop("RAY_ADDRESS", None)
        env.pop("PYTHONPATH", None)
        # the tiny model present, so verl's checks of the model sections run too; the arith data, so the batch checks
        # read its rows
        for cmd in (["model", "init", "tiny"], ["data", "prep", "arith"]):
            subprocess.run([TRAINCTL, *cmd], env=env, cwd=work, check=True, capture_output=True)
        rows = []

        new, old = _against_baseline("help", [TRAINCTL, "--help"], 0, env, work, max(n, 9), base)
        rows.append(Row("trainctl --help", new, old, target="<= 0.10 s (issue 54)", ok=new <= 0.10, note=base_note))

        new, old = _against_baseline("typo", [TRAINCTL, *TYPO], 1, env, work, max(n, 9), base)
        rows.append(Row("config validate, a key typo", new, old, target="<= 0.30 s (issue 54)", ok=new <= 0.30))

        new, old = _against_baseline("dry_run", [TRAINCTL, *DRY_RUN], 0, env, work, n, base)
        rows.append(
            Row(
                "full --dry-run, a config validated before",
                new,
                old,
                target="no verl import (issue 54)",
                note="grpo qwen2.5-7b gsm8k 8gpu: verl's verdict on it kept",
            )
        )
        new, old = _against_baseline("dry_run", _first_of_its_config([TRAINCTL, *DRY_RUN]), 0, env, work, n, base)
        rows.append(
            Row(
                "full --dry-run, the first of its config",
                new,
                old,
                target="verl imported once, for its validation",
                note="its verdict removed before each run",
            )
        )

        typo = interleaved(
            {
                "trainctl": ([TRAINCTL, "train", "algorithm=grpo", "algorithm.kl_ctrl.kl_coeff=0.01", "--dry-run"], 1),
                "raw": ([*RAW_PPO, "algorithm.kl_ctrl.kl_coeff=0.01"], 1),
            },
            env,
            work,
            n,
        )
        rows.append(
            Row(
                "unknown key reported",
                typo["trainctl"],
                typo["raw"],
                target="<= 1.0 s and >= 6x (issue 2)",
                ok=typo["trainctl"] <= 1.0 and typo["raw"] / typo["trainctl"] >= 6,
                note="baseline: raw verl's time to the same error",
            )
        )

        batch = interleaved(
            {
                "trainctl": ([TRAINCTL, "train", *BATCH_TRAINCTL, "--dry-run"], 1),
                "raw": ([*RAW_PPO, *BATCH_RAW], 1),
            },
            env,
            work,
            n,
        )
        rows.append(
            Row(
                "batch arithmetic error reported",
                batch["trainctl"],
                batch["raw"],
                target="<= 1.0 s and >= 6x (issue 2)",
                ok=batch["trainctl"] <= 1.0 and batch["raw"] / batch["trainctl"] >= 6,
            )
        )

        full = interleaved(
            {
                "trainctl": (
                    _first_of_its_config([TRAINCTL, "train", *FULL_TINY, "--dry-run"]),
                    0,
                ),
                "raw": ([*RAW_PPO, "algorithm.kl_ctrl.kl_coeff=0.01"], 1),
            },
            env,
            work,
            n,
        )
        rows.append(
            Row(
                "full --dry-run with verl's validation",
                full["trainctl"],
                full["raw"],
                target="<= 0.5x raw verl's time to first error (issue 15)",
                ok=full["trainctl"] <= 0.5 * full["raw"],
                note="model=tiny, present: verl's model checks run; its verdict removed before each run",
            )
        )
    report("config", rows)
    return rows


if __name__ == "__main__":
    main()
