"""Issue 2: how fast trainctl answers, against raw verl's time to its first error.

Targets (medians on the 2-core dev machine): `trainctl --help` <= 0.3 s; an unknown key or a batch-arithmetic error
<= 1.0 s and at least 6x faster than `python -m verl.trainer.main_ppo` reporting the same; a full --dry-run
(verl's own validation included) no slower than raw verl's time to its first error (issue 2), and at most half of it
(issue 15; not met: importing the modules verl's validation lives in takes most of raw verl's time). The floor, with
the model present as here: verl's model check (HFModelConfig) needs `transformers.AutoConfig` and `AutoTokenizer`,
and importing those alone imports torch (transformers.generation.logits_process) and torch._dynamo
(transformers.masking_utils): 3.2-4 s, before trainctl's own 0.6-0.9 s, against a target of 3.7-4.6 s.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from common import VENV_BIN, Row, interleaved, report, reps

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


def main() -> list[Row]:
    n = reps()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        env = {**os.environ, "TRAINCTL_HOME": str(home), "TRAINCTL_CACHE": str(Path(tmp) / "cache")}
        env.pop("RAY_ADDRESS", None)
        from trainctl.models.tiny import init_tiny

        init_tiny(home / "models" / "tiny")  # present, so verl's checks of the model sections run too
        rows = []

        t = interleaved({"help": ([TRAINCTL, "--help"], 0)}, env, tmp, max(n, 9))["help"]
        rows.append(Row("trainctl --help", t, target="<= 0.30 s", ok=t <= 0.30))

        typo = interleaved(
            {
                "trainctl": ([TRAINCTL, "train", "algorithm=grpo", "algorithm.kl_ctrl.kl_coeff=0.01", "--dry-run"], 1),
                "raw": ([*RAW_PPO, "algorithm.kl_ctrl.kl_coeff=0.01"], 1),
            },
            env,
            tmp,
            n,
        )
        rows.append(
            Row(
                "unknown key reported",
                typo["trainctl"],
                typo["raw"],
                target="<= 1.0 s and >= 6x",
                ok=typo["trainctl"] <= 1.0 and typo["raw"] / typo["trainctl"] >= 6,
            )
        )

        batch = interleaved(
            {
                "trainctl": ([TRAINCTL, "train", *BATCH_TRAINCTL, "--dry-run"], 1),
                "raw": ([*RAW_PPO, *BATCH_RAW], 1),
            },
            env,
            tmp,
            n,
        )
        rows.append(
            Row(
                "batch arithmetic error reported",
                batch["trainctl"],
                batch["raw"],
                target="<= 1.0 s and >= 6x",
                ok=batch["trainctl"] <= 1.0 and batch["raw"] / batch["trainctl"] >= 6,
            )
        )

        full = interleaved(
            {
                "trainctl": ([TRAINCTL, "train", "algorithm=grpo", "model=tiny", "hardware=8gpu", "--dry-run"], 0),
                "raw": ([*RAW_PPO, "algorithm.kl_ctrl.kl_coeff=0.01"], 1),
            },
            env,
            tmp,
            n,
        )
        rows.append(
            Row(
                "full --dry-run (verl's validation included)",
                full["trainctl"],
                full["raw"],
                target="<= 0.5x raw verl's time to first error (issue 15)",
                ok=full["trainctl"] <= 0.5 * full["raw"],
            )
        )
    report("config", rows)
    return rows


if __name__ == "__main__":
    main()
