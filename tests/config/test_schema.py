"""trainctl's own sections, declared once (trainctl.config.schema): documented, checked, inherited, loaded."""

from __future__ import annotations

import pytest

from trainctl.config.load import load
from trainctl.config.schema import SECTIONS, declares, keys
from trainctl.config.search import SearchPath
from trainctl.errors import ConfigProblems


def test_every_declared_key_is_documented():
    undocumented = [key for key, _, doc in keys() if not doc.strip()]
    assert not undocumented, undocumented


def test_declares_knows_trainctls_keys_from_the_backends():
    assert declares("hardware.rollout_tp") and declares("data.source.columns.prompt_col")
    assert declares("model.arch.hidden_size")
    assert not declares("data.train_batch_size")  # verl's
    assert not declares("hardware.rollout_tp.x") and not declares("actor_rollout_ref.actor.optim.lr")


@pytest.mark.parametrize(
    "group",
    ["algorithm", "model", "data", "reward", "env", "tools", "hardware", "logger", "lora", "offpolicy", "recipe"],
)
def test_every_shipped_option_loads_against_the_schema(group):
    for option in SearchPath.default().options(group):
        cfg = load([f"{group}={option}"]).cfg
        for section in SECTIONS:
            assert getattr(cfg, section) is not None


def test_variants_inherit_and_set_only_what_differs():
    cfg = load(["hardware=4x8gpu"]).cfg.hardware
    assert (cfg.nnodes, cfg.gpus_per_node, cfg.launcher, cfg.rollout_tp) == (4, 8, "ray_job", 4)
    assert cfg.torch_compile is True  # from _base, through 8gpu and 2x8gpu
    assert "_base" not in SearchPath.default().options("hardware")
    model = load(["model=qwen3-8b"]).cfg.model
    assert model.path.endswith("/models/qwen3-8b")  # the base's ${paths.models}/${model.name}


def _user_conf(tmp_path, group: str, name: str, text: str) -> SearchPath:
    d = tmp_path / "team" / group
    d.mkdir(parents=True)
    (d / f"{name}.yaml").write_text(text)
    return SearchPath.default([tmp_path / "team"])


def test_an_unknown_key_in_a_users_group_file_names_the_file(tmp_path):
    search = _user_conf(tmp_path, "hardware", "box", "defaults:\n  - _base\n  - _self_\nname: box\nrolout_tp: 2\n")
    with pytest.raises(ConfigProblems) as e:
        load(["hardware=box"], search)
    (p,) = e.value.problems
    where = str(tmp_path / "team" / "hardware" / "box.yaml")
    assert p.message == f"unknown config key 'hardware.rolout_tp' (set in {where})."
    assert p.details == ["Did you mean 'hardware.rollout_tp'?"]
    assert p.hint == f"fix or remove it in {where}"


def test_a_wrong_type_in_a_users_file_and_a_missing_key(tmp_path):
    search = _user_conf(tmp_path, "model", "mine", "name: mine\ncontext_length: long\n")
    with pytest.raises(ConfigProblems) as e:
        load(["model=mine"], search)
    messages = {p.key: p.message for p in e.value.problems}
    assert messages["model.context_length"].startswith("model.context_length must be an integer, not 'long'")
    assert messages["model.path"] == "model.path is missing from the composed config (it must be a string)."


def test_a_users_option_shadows_the_built_in_one(tmp_path):
    search = _user_conf(
        tmp_path, "hardware", "8gpu", "defaults:\n  - _base\n  - _self_\nname: 8gpu\ngpus_per_node: 6\n"
    )
    assert load(["hardware=8gpu"], search).cfg.hardware.gpus_per_node == 6
    assert load(["hardware=8gpu"]).cfg.hardware.gpus_per_node == 8


def test_a_reward_kinds_settings_sit_beside_kind_and_verls_reward_keys_stay_verls():
    assert declares("reward.kind") and declares("reward.url") and declares("reward.target_chars")
    assert not declares("reward.num_workers") and not declares("reward.reward_manager.name")
    assert not declares("reward.url.x")
    reward = load(["reward=judge", "reward.url=http://127.0.0.1:9/v1"]).cfg.reward
    assert (reward.name, reward.kind) == ("judge", "judge")
    assert reward.settings["url"] == "http://127.0.0.1:9/v1" and reward.settings["mode"] == "group"
