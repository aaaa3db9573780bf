"""What trainctl runs through TRL (trl 1.12): one row per trainer, and what each accepts.

Every TRL algorithm is one row of TRAINERS, read by the backend (trainctl.backends.trl: defaults, launch command),
the checks (trainctl.checks.trl), the schemas (trainctl.backends.schemas) and the entry point that trains
(trainctl.runtime.trl_entry). A new TRL trainer is a new row (and an algorithm option naming its family).
"""

from __future__ import annotations

from dataclasses import dataclass

# the module trainctl launches for every TRL trainer (under torchrun, or with --ray under Ray Train)
ENTRY = "trainctl.runtime.trl_entry"

# trainctl's own keys beside TRL's dataclasses: where the training rows are
DATA_KEYS = {"train_files": None, "val_files": None}


@dataclass(frozen=True)
class Trainer:
    """One TRL trainer as trainctl runs it."""

    family: str  # algorithm.family; the backend is trl-<family>, its config file in the run folder trl_<family>.yaml
    config: str  # the config dataclass (module:attribute): TrainingArguments and the trainer's own fields
    trainer: str  # the trainer class (module:attribute)
    title: str
    # causal_lm: AutoModelForCausalLM; classifier: AutoModelForSequenceClassification with one label (the reward)
    model: str
    # the rows it reads: dpo (prompt, chosen, rejected) or kto (prompt, completion, label: unpaired)
    data_format: str
    # a frozen reference model beside the policy (a copy for full fine-tuning, the adapter-disabled base for LoRA)
    reference: bool
    row: str  # what one training row is, in the plan's numbers: pairs, examples
    # its held-out metrics as TRL logs them: (accuracy, margin); None where it logs no accuracy
    accuracy: str | None
    margin: str
    # what `beta` means to it (None: it has no beta)
    beta: str | None


TRAINERS: dict[str, Trainer] = {
    t.family: t
    for t in (
        Trainer(
            "dpo", "trl:DPOConfig", "trl:DPOTrainer", "TRL DPOTrainer", "causal_lm", "dpo", True, "pairs",
            "eval/rewards/accuracies", "eval/rewards/margins", "DPO's KL strength",
        ),
        Trainer(
            "rm", "trl:RewardConfig", "trl:RewardTrainer", "TRL RewardTrainer", "classifier", "dpo", False, "pairs",
            "eval/accuracy", "eval/margin", None,
        ),
        Trainer(
            "kto", "trl:KTOConfig", "trl:KTOTrainer", "TRL KTOTrainer", "causal_lm", "kto", True, "examples",
            None, "eval/rewards/margins", "KTO's KL strength",
        ),
        Trainer(
            "orpo", "trl.experimental.orpo:ORPOConfig", "trl.experimental.orpo:ORPOTrainer", "TRL ORPOTrainer",
            "causal_lm", "dpo", False, "pairs", "eval/rewards/accuracies", "eval/rewards/margins",
            "ORPO's odds-ratio weight (lambda in the paper)",
        ),
        Trainer(
            "cpo", "trl.experimental.cpo:CPOConfig", "trl.experimental.cpo:CPOTrainer", "TRL CPOTrainer", "causal_lm",
            "dpo", False, "pairs", "eval/rewards/accuracies", "eval/rewards/margins",
            "the reward scale (SimPO's beta)",
        ),
    )
}  # fmt: skip

# TRL 1.12's loss types per trainer (each config's loss_type help; DPOConfig.loss_type accepts a list of them)
LOSS_TYPES: dict[str, tuple[str, ...]] = {
    "dpo": (
        "sigmoid",
        "hinge",
        "ipo",
        "exo_pair",
        "nca_pair",
        "robust",
        "bco_pair",
        "sppo_hard",
        "aot",
        "aot_unpaired",
        "apo_zero",
        "apo_down",
        "discopop",
        "sft",
        "sigmoid_norm",
    ),
    "kto": ("kto", "apo_zero_unpaired"),
    "cpo": ("sigmoid", "hinge", "ipo", "simpo", "alphapo"),
}
