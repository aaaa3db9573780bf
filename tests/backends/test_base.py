from __future__ import annotations

from pathlib import Path

import pytest

from trainctl.backends.base import flatten, key_paths
from trainctl.config.overrides import render_override, render_value


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -3,
        1e-06,
        0.28,
        1000000000,
        "vllm",
        "/abs/path/to/model",
        "~/models/x",
        "token-mean",
        "seq-mean-token-sum-norm",
        "a b",
        "it's",
        "true",
        "null",
        "1e5",
        "${data.max_response_length}",
        "",
        [1, 2],
        ["console", "wandb"],
        [],
        {},
        {"enable": True, "len": 4096},
    ],
)
def test_rendered_values_parse_back_with_hydras_grammar(value):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_override(f"k={render_value(value)}").value()
    assert parsed == value


def test_render_override_marks_additions():
    assert render_override("a.b", 1) == "a.b=1"
    assert render_override("a.b", "x", added=True) == "+a.b=x"


def test_flatten_and_key_paths():
    tree = {"a": {"b": 1, "c": {}}, "d": [1]}
    assert flatten(tree) == [("a.b", 1), ("a.c", {}), ("d", [1])]
    assert key_paths(tree) == {"a", "a.b", "a.c", "d"}


def _by_omegaconf(comp, tc: dict, mapping: str):
    """The mapping table as OmegaConf resolves it (what resolve_mapping did before it read the table itself)."""
    from omegaconf import OmegaConf

    table = OmegaConf.load(comp.search.builtin / "mapping" / f"{mapping}.yaml")
    root = OmegaConf.create({**tc, "__mapping__": table})
    return OmegaConf.to_container(root["__mapping__"], resolve=True)


MAPPED_CONFIGS = [
    *([f"recipe={r}"] for r in sorted(p.stem for p in (Path(__file__).parents[2] / "conf" / "recipe").glob("*.yaml"))),
    ["algorithm=ppo", "hardware=cpu", "lora=r8", "logger=[wandb,mlflow]"],
    ["algorithm=grpo", "hardware=2x8gpu", "lora=qlora-r16", "run.val_every=5", "run.save_every=10"],
    ["algorithm=sft", "hardware=cpu", "lora=r16", "logger=tensorboard", "run.max_steps=3"],
    ["algorithm=dpo", "hardware=1gpu", "lora=r32", "logger=[wandb]", "run.val_every=2"],
    ["algorithm=kto", "hardware=cpu", "run.save_every=4"],
    ["algorithm=grpo", "hardware=cpu", "hardware.rollout_engine=vllm", "tools=calculator"],
]


@pytest.mark.parametrize("args", MAPPED_CONFIGS, ids=lambda a: " ".join(a))
def test_the_mapping_table_read_without_omegaconf_is_what_omegaconf_reads(args, isolated):
    from trainctl.backends import backend_for
    from trainctl.config.interpolation import resolve
    from trainctl.config.load import load
    from trainctl.config.yaml_files import config_file

    loaded = load(args)
    tc = loaded.cfg.to_dict()
    mapping = backend_for(loaded.cfg.family).mapping
    table = config_file(str(loaded.comp.search.builtin / "mapping" / f"{mapping}.yaml"))[1]
    plain = resolve(table, tc)
    assert plain is not None, "a shipped mapping table is read without OmegaConf"
    expected = _by_omegaconf(loaded.comp, tc, mapping)
    assert plain == expected
    assert repr(plain) == repr(expected)  # the same types too (1 == 1.0 == True)
