from __future__ import annotations

import hashlib


def _digest(folder):
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(folder.iterdir()) if f.is_file()}


def test_tiny_model_is_identical_every_time(tiny_model_dir, tmp_path):
    from trainctl.models.tiny import init_tiny

    again = init_tiny(tmp_path / "tiny")
    assert _digest(again) == _digest(tiny_model_dir)


def test_tiny_model_loads_and_round_trips_ids(tiny_model_dir):
    import yaml
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainctl.models.tiny import build_tokenizer
    from trainctl.paths import builtin_conf_dir

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    text = tok.apply_chat_template(
        [{"role": "user", "content": "What is 3 + 4?"}, {"role": "assistant", "content": "3 + 4 = 7\n#### 7"}],
        tokenize=False,
    )
    assert text == "<|im_start|>user\nWhat is 3 + 4?<|im_end|>\n<|im_start|>assistant\n3 + 4 = 7\n#### 7<|im_end|>\n"
    ids = tok(text)["input_ids"]
    assert build_tokenizer()(text)["input_ids"] == ids, "AutoTokenizer re-applies Qwen2's pre-tokenizer"
    assert tok.decode(ids) == text
    declared = yaml.safe_load((builtin_conf_dir() / "model" / "tiny.yaml").read_text())
    params = sum(p.numel() for p in model.parameters())
    assert abs(params - declared["params"]) / params < 0.01
    assert model.config.num_hidden_layers == declared["arch"]["layers"]
