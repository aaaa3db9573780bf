"""What TRL accepts for DPO (trl 1.x), and the keys trainctl's DPO entry point adds beside TRL's dataclasses."""

# the module trainctl launches for DPO (under torchrun, or with --ray under Ray Train)
ENTRY = "trainctl.runtime.trl_dpo_entry"

# trainctl's own keys beside TRL's dataclasses: where the preference pairs are
DATA_KEYS = {"train_files": None, "val_files": None}

# TRL 1.16's DPO loss types (DPOConfig.loss_type help; DPOConfig.loss_type accepts a list of them)
LOSS_TYPES = (
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
)
