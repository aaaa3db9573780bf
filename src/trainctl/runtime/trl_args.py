"""Splitting the flat TRL backend config into the trainer's config, ModelConfig and trainctl's data keys."""

from __future__ import annotations

import dataclasses

from trainctl.facts.trl import DATA_KEYS, TRAINERS


def load_class(dotted: str) -> type:
    """A class named `module:attribute` (trainctl.facts.trl.TRAINERS). Imports TRL."""
    import importlib

    from trainctl.silence import quiet

    module, _, name = dotted.partition(":")
    with quiet():  # trl.experimental warns on import that its API may change
        return getattr(importlib.import_module(module), name)


def split_args(flat: dict, family: str = "dpo") -> tuple[dict, dict, dict]:
    """(the trainer's config kwargs, ModelConfig kwargs, data keys). Imports TRL."""
    from trl import ModelConfig

    config = load_class(TRAINERS[family].config)
    trainer_fields = {f.name for f in dataclasses.fields(config) if f.init}
    model_fields = {f.name for f in dataclasses.fields(ModelConfig) if f.init}
    trainer, model, data = {}, {}, {}
    for key, value in flat.items():
        if key in DATA_KEYS:
            data[key] = value
        elif key in trainer_fields:
            trainer[key] = value
        elif key in model_fields:
            model[key] = value
    return trainer, model, data
