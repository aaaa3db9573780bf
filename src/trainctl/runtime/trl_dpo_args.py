"""Splitting the flat TRL backend config into DPOConfig, ModelConfig and trainctl's data keys."""

from __future__ import annotations

import dataclasses

from trainctl.facts.trl import DATA_KEYS


def split_args(flat: dict) -> tuple[dict, dict, dict]:
    """(DPOConfig kwargs, ModelConfig kwargs, data keys). Imports TRL."""
    from trl import DPOConfig, ModelConfig

    dpo_fields = {f.name for f in dataclasses.fields(DPOConfig) if f.init}
    model_fields = {f.name for f in dataclasses.fields(ModelConfig) if f.init}
    dpo, model, data = {}, {}, {}
    for key, value in flat.items():
        if key in DATA_KEYS:
            data[key] = value
        elif key in dpo_fields:
            dpo[key] = value
        elif key in model_fields:
            model[key] = value
    return dpo, model, data
