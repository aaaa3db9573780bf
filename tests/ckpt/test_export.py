"""`ckpt export --to gguf` on real models, checked by llama.cpp itself (the xllamacpp wheel): the tiny model and a
trained tiny run at every dtype, a LoRA run (merged first), tiny Llama and Qwen3 models, SmolLM2 (imported from
PyPI's GGUF); the round trip through `model import`; interrupted exports; the refusals, before anything is written.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainctl.ckpt.llamacpp import unavailable


@pytest.fixture(scope="module")
def llama_cpp():
    """Skips, saying why, where llama.cpp's wheel does not run (make install installs it where it does)."""
    reason = unavailable()
    if reason:
        pytest.skip(reason)


def _fields(path: Path) -> dict:
    from gguf import GGUFReader

    reader = GGUFReader(path)
    lists = ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges")
    out = {k: f.contents() for k, f in reader.fields.items() if k not in lists}
    out["pre"] = reader.fields["tokenizer.ggml.pre"].contents()
    out["n_tokens"] = len(reader.fields["tokenizer.ggml.tokens"].data)
    out["types"] = {t.name: t.tensor_type.name for t in reader.tensors}
    return out


def _greedy(folder: Path, max_tokens: int = 24) -> list[list[int]]:
    """trainctl's own greedy answers (its sampler, fp32) to the verification's questions."""
    from trainctl.ckpt.gguf_verify import QUESTIONS
    from trainctl.runtime.sampler import SamplingParams, generate, load_policy

    model, tok, eos = load_policy(str(folder))
    prompts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True) for q in QUESTIONS]
    prompts = [p if isinstance(p, list) else p["input_ids"] for p in prompts]
    return [c.token_ids for c in generate(model, prompts, SamplingParams(max_tokens=max_tokens, temperature=0), eos)]


def test_the_tiny_model_at_every_dtype_is_verified_by_llama_cpp(llama_cpp, tiny_model_dir, tmp_path):
    from trainctl.ckpt.export import export, plan_export

    tokenizer_config = json.loads((tiny_model_dir / "tokenizer_config.json").read_text())
    template = (tiny_model_dir / "chat_template.jinja").read_text()
    for dtype in ("f32", "f16", "bf16", "q8_0"):
        plan = plan_export(tiny_model_dir, "gguf", dtype, tmp_path / f"tiny-{dtype}.gguf")
        assert plan.unverified is None and plan.pre == "qwen2" and plan.arch.name == "qwen2"
        done = export(plan)
        v = done.verdict
        assert v.passed, v.problems
        assert v.tokenizer["equal"] == v.tokenizer["texts"] == 6
        assert v.template["equal"] == v.template["conversations"] == 3
        if dtype in ("f32", "f16"):
            assert v.greedy["equal"] == 3 and v.greedy["near_ties"] == 0 and v.greedy["agreement"] == 1.0
        assert (
            0 <= v.greedy["agreement"] <= 1
            and f"{v.greedy['agreeing']}/{v.greedy['tokens']} tokens agree" in v.lines()[2]
        )
        f = _fields(done.path)
        assert f["general.architecture"] == "qwen2" and f["pre"] == "qwen2"
        assert f["tokenizer.chat_template"] == template and f["n_tokens"] == 512  # the embedding's rows
        assert f["tokenizer.ggml.eos_token_id"] == 435 and tokenizer_config["eos_token"] == "<|im_end|>"
        two_d = {"f32": "F32", "f16": "F16", "bf16": "BF16", "q8_0": "Q8_0"}[dtype]
        assert f["types"]["blk.0.attn_q.weight"] == two_d and f["types"]["blk.0.attn_norm.weight"] == "F32"
        assert "output.weight" not in f["types"]  # tied: llama.cpp reads the token embedding
        saved = json.loads(done.path.with_suffix(".verification.json").read_text())
        assert saved["passed"] is True and saved["dtype"] == dtype and saved["greedy"] == v.greedy
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".gguf") == [
        "tiny-bf16.gguf", "tiny-f16.gguf", "tiny-f32.gguf", "tiny-q8_0.gguf"
    ]  # fmt: skip
    assert not list(tmp_path.glob(".*partial*"))
    card = (tmp_path / "README.md").read_text()
    assert card.count("| tiny-") == 4 and "license: apache-2.0" in card and "lms import" in card


def test_a_trained_run_exports_at_every_dtype_with_a_card_and_modelfile(llama_cpp, cli, sft_run, tmp_path):
    for dtype in ("f32", "f16", "bf16", "q8_0"):
        result = cli("ckpt", "export", str(sft_run.path), "--to", "gguf", "--dtype", dtype, "--out", str(tmp_path))
        assert result.exit_code == 0, result.output
        assert f"Wrote {tmp_path / f'sft-step48-{dtype}.gguf'}" in result.stdout
        assert "Verified by llama.cpp" in result.stdout and "6/6 probe texts" in result.stdout
        if dtype in ("f32", "f16"):
            assert "greedy: 3/3 answers equal to trainctl's" in result.stdout
        assert "merged first as `trainctl ckpt merge` merges it (shards joined)" in result.stderr
    card = (tmp_path / "README.md").read_text()
    assert "# sft (step 48)" in card and "trainctl train recipe=quickstart run.save_every=16 logger=console" in card
    assert "val/loss" in card and "| algorithm | sft (verl-sft) |" in card
    modelfile = (tmp_path / "Modelfile").read_text()
    assert modelfile.startswith("# Ollama") and "FROM ./sft-step48-q8_0.gguf" in modelfile
    assert "<|im_start|>{{ .Role }}" in modelfile and 'PARAMETER stop "<|im_end|>"' in modelfile


def test_a_lora_run_is_merged_first_and_its_export_answers_as_the_merge(llama_cpp, cli, dpo_runs, tmp_path):
    result = cli("ckpt", "export", str(dpo_runs["lora"]), "--to", "gguf", "--out", str(tmp_path / "lora.gguf"))
    assert result.exit_code == 0, result.output
    assert "LoRA r=8 folded into" in result.stderr and "3/3 answers equal" in result.stdout
    merged = cli("ckpt", "merge", str(dpo_runs["lora"]), "--out", str(tmp_path / "merged"))
    assert merged.exit_code == 0, merged.output
    card = (tmp_path / "merged" / "README.md").read_text()
    assert "A Hugging Face (safetensors) model" in card and "| LoRA | r=8 alpha=16" in card


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_llama_and_qwen3_architectures(family, llama_cpp, tiny_model_dir, tmp_path):
    """Random weights with a wide init, so that every head and position counts: Llama's Q/K rows must be permuted
    for llama.cpp's rotary layout (its answers diverge from the first token otherwise), Qwen3 has its own head size
    and Q/K norms, and an untied output layer."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    from trainctl.ckpt.export import export, plan_export

    shape = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2)
    shape.update(num_key_value_heads=1, eos_token_id=435, pad_token_id=436, bos_token_id=None, initializer_range=0.3)
    torch.manual_seed(0)
    if family == "llama":
        model = LlamaForCausalLM(LlamaConfig(tie_word_embeddings=True, **shape))
    else:
        model = Qwen3ForCausalLM(Qwen3Config(head_dim=48, tie_word_embeddings=False, **shape))
    folder = tmp_path / family
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(folder)
    done = export(plan_export(folder, "gguf", "f32", tmp_path / "out"))
    v = done.verdict
    assert v.passed and v.greedy["equal"] == 3 and v.greedy["agreement"] == 1.0, v.greedy
    assert v.greedy["max_logprob_gap"] < 0.05
    f = _fields(done.path)
    assert f["general.architecture"] == family
    if family == "qwen3":
        assert f["qwen3.attention.key_length"] == 48 and "output.weight" in f["types"]
        assert "blk.1.attn_k_norm.weight" in f["types"]


def test_model_import_of_an_export_gives_the_same_greedy_answers(llama_cpp, cli, sft_run, tmp_path):
    from trainctl.ckpt.layout import list_checkpoints
    from trainctl.ckpt.lineage import merged

    out = tmp_path / "sft.gguf"
    assert cli("ckpt", "export", str(sft_run.path), "--to", "gguf", "--dtype", "f32", "--out", str(out)).exit_code == 0
    result = cli("model", "import", str(out), "--name", "sft-back")
    assert result.exit_code == 0, result.output
    back = Path(os.environ["TRAINCTL_HOME"]) / "models" / "sft-back"
    source = merged(list_checkpoints(sft_run.path).latest)
    assert _greedy(back) == _greedy(source)


def test_an_interrupted_export_leaves_nothing(llama_cpp, cli, tiny_model_dir, tmp_path, monkeypatch):
    """Ctrl-C while llama.cpp checks the written file: the staging file goes, and the folder the export made."""
    import trainctl.ckpt.gguf_verify as verify_mod

    def interrupted(path, *args, **kwargs):
        assert path.is_file() and path.name.startswith(".tiny-f16.gguf.partial-")  # written in full
        raise KeyboardInterrupt

    monkeypatch.setattr(verify_mod, "verify", interrupted)
    out = tmp_path / "exports" / "tiny-f16.gguf"
    result = cli("ckpt", "export", str(tiny_model_dir), "--to", "gguf", "--out", str(out))
    assert result.exit_code == 130, result.output
    assert not (tmp_path / "exports").exists()


def test_a_killed_exports_staging_file_is_removed_by_the_next(llama_cpp, cli, tiny_model_dir, tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale = tmp_path / f".tiny-q8_0.gguf.partial-{gone.pid}"
    stale.write_bytes(b"GGUF half")
    mine = tmp_path / f".tiny-q8_0.gguf.partial-{os.getpid()}-other"  # not a PID: left alone
    mine.write_bytes(b"")
    result = cli("ckpt", "export", str(tiny_model_dir), "--to", "gguf", "--dtype", "q8_0", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert not stale.exists() and mine.exists() and (tmp_path / "tiny-q8_0.gguf").is_file()


def _tiny_copy(tiny_model_dir: Path, tmp_path: Path, edit=None, config=None) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    if edit:
        tj = json.loads((folder / "tokenizer.json").read_text())
        edit(tj)
        (folder / "tokenizer.json").write_text(json.dumps(tj))
    if config:
        c = json.loads((folder / "config.json").read_text())
        c.update(config)
        (folder / "config.json").write_text(json.dumps(c))
    return folder


def _set_pre(value):
    return lambda tj: tj.update(pre_tokenizer=value)


REFUSALS = {
    "an unknown split rule": (
        dict(
            edit=_set_pre({"type": "Split", "pattern": {"Regex": r"\w+|\s+"}, "behavior": "Isolated", "invert": False})
        ),
        "llama.cpp would not recognise this tokenizer's pre-tokenizer",
    ),
    "a sentencepiece vocabulary": (
        dict(edit=_set_pre({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False})),
        "SentencePiece-style BPE (Metaspace)",
    ),
    "a prefix space": (
        dict(edit=_set_pre({"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True})),
        "would not recognise",
    ),
    "rope scaling": (
        dict(config={"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0}}),
        "RoPE scaling 'yarn' is not exported",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refusals_come_before_anything_is_written(case, cli, tiny_model_dir, tmp_path):
    changes, message = REFUSALS[case]
    folder = _tiny_copy(tiny_model_dir, tmp_path, **changes)
    out = tmp_path / "out"
    result = cli("ckpt", "export", str(folder), "--to", "gguf", "--out", str(out))
    assert result.exit_code == 1, result.output
    assert message in result.stderr and "Hint:" in result.stderr
    assert not out.exists()


def test_an_architecture_it_cannot_export_is_refused_with_the_list(cli, tiny_reward_model_dir, tmp_path):
    out = tmp_path / "out"
    result = cli("ckpt", "export", str(tiny_reward_model_dir), "--to", "gguf", "--out", str(out / "rm.gguf"))
    assert result.exit_code == 1
    assert "Qwen2ForSequenceClassification cannot be exported to GGUF" in result.stderr
    assert "it exports: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM" in result.stderr
    assert not out.exists()


def test_bad_options_and_an_existing_file(cli, tiny_model_dir, tmp_path):
    onnx = cli("ckpt", "export", str(tiny_model_dir), "--to", "onnx", "--out", str(tmp_path))
    assert onnx.exit_code == 1 and "--to 'onnx': trainctl exports to gguf" in onnx.stderr
    q4 = cli("ckpt", "export", str(tiny_model_dir), "--to", "gguf", "--dtype", "q4_0", "--out", str(tmp_path))
    assert q4.exit_code == 1 and "f32, f16, bf16, q8_0" in q4.stderr
    (tmp_path / "tiny-f16.gguf").write_bytes(b"mine")
    exists = cli("ckpt", "export", str(tiny_model_dir), "--to", "gguf", "--out", str(tmp_path))
    assert exists.exit_code == 1 and "--force" in exists.stderr
    assert (tmp_path / "tiny-f16.gguf").read_bytes() == b"mine"


def test_dry_run_writes_nothing(cli, sft_run, tmp_path):
    out = tmp_path / "out" / "x.gguf"
    result = cli("ckpt", "export", str(sft_run.path), "--to", "gguf", "--dtype", "q8_0", "--out", str(out), "--dry-run")
    assert result.exit_code == 0, result.output
    assert f"Would write {out}" in result.stdout and "as q8_0" in result.stdout
    assert not out.parent.exists()


def test_without_llama_cpp_the_file_is_written_unverified_saying_so(cli, tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "xllamacpp", None)  # `import xllamacpp` fails, as where it is not installed
    result = cli("ckpt", "export", str(tiny_model_dir), "--to", "gguf", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "not verified: llama.cpp's wheel (xllamacpp) is not installed: pip install 'xllamacpp==" in result.stderr
    saved = json.loads((tmp_path / "tiny-f16.verification.json").read_text())
    assert saved["passed"] is None and "xllamacpp" in saved["not_verified"]


def test_a_readme_that_is_not_trainctls_is_left_alone(cli, tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "xllamacpp", None)
    (tmp_path / "README.md").write_text("# my notes\n")
    result = cli("ckpt", "export", str(tiny_model_dir), "--to", "gguf", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "README.md").read_text() == "# my notes\n"
    assert "README.md is not trainctl's: left as it was" in result.stderr and (tmp_path / "Modelfile").is_file()


def test_smollm2_at_f16_is_verified(llama_cpp, cli, smollm2, tmp_path):
    """SmolLM2-135M (a Llama: Q/K permuted; 49,152 tokens; ChatML with a default system prompt), imported from PyPI's
    GGUF as the session does."""
    from tests.real_model import place

    folder = place(smollm2, Path(os.environ["TRAINCTL_HOME"]))
    result = cli("ckpt", "export", str(folder), "--to", "gguf", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    saved = json.loads((tmp_path / "smollm2-135m-f16.verification.json").read_text())
    assert saved["passed"] and saved["pre_tokenizer"] == "gpt-2" and saved["architecture"] == "llama"
    assert saved["tokenizer"]["equal"] == 6 and saved["template"]["equal"] == 3
    # "the sea" reaches a tie at f16: 0.0015 nats between two tokens in trainctl's own model
    assert saved["greedy"]["equal"] + saved["greedy"]["near_ties"] == 3, saved["greedy"]
    f = _fields(tmp_path / "smollm2-135m-f16.gguf")
    assert f["tokenizer.ggml.add_bos_token"] is False and f["llama.rope.dimension_count"] == 64
    modelfile = (tmp_path / "Modelfile").read_text()
    assert 'SYSTEM """You are a helpful AI assistant named SmolLM, trained by Hugging Face"""' in modelfile
    assert "license: apache-2.0" in (tmp_path / "README.md").read_text()


@pytest.mark.slow
def test_smollm2_at_every_dtype_and_back(llama_cpp, cli, smollm2, tmp_path):
    """SmolLM2 at every dtype, verified; the f32 file imported back (transformers undoes the Q/K permutation)
    answers as the source does."""
    from tests.real_model import place

    folder = place(smollm2, Path(os.environ["TRAINCTL_HOME"]))
    for dtype in ("f32", "f16", "bf16", "q8_0"):
        result = cli("ckpt", "export", str(folder), "--to", "gguf", "--dtype", dtype, "--out", str(tmp_path))
        assert result.exit_code == 0, result.output
        assert "pre-tokenizer gpt-2" in result.stderr and "6/6 probe texts" in result.stdout
        greedy = json.loads((tmp_path / f"smollm2-135m-{dtype}.verification.json").read_text())["greedy"]
        if dtype == "f32":
            assert greedy["equal"] == 3, greedy
        if dtype == "f16":  # "the sea" reaches a tie at f16: 0.0015 nats between two tokens in trainctl's own model
            assert greedy["equal"] + greedy["near_ties"] == 3, greedy
    back = cli("model", "import", str(tmp_path / "smollm2-135m-f32.gguf"), "--name", "smollm2-back")
    assert back.exit_code == 0, back.output
    assert _greedy(Path(os.environ["TRAINCTL_HOME"]) / "models" / "smollm2-back") == _greedy(folder)


@pytest.mark.slow
def test_ctrl_c_of_a_real_export_leaves_nothing(llama_cpp, smollm2, tmp_path):
    """SIGINT to `trainctl ckpt export` of SmolLM2 while it writes or verifies: exit 130 and no file."""
    import signal

    from tests.real_model import place

    home = tmp_path / "home"
    folder = place(smollm2, home)
    out = tmp_path / "out"
    env = {**os.environ, "TRAINCTL_HOME": str(home)}
    argv = [sys.executable, "-m", "trainctl", "ckpt", "export", str(folder), "--to", "gguf", "--dtype", "f32"]
    proc = subprocess.Popen(
        [*argv, "--out", str(out)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    deadline = time.monotonic() + 120
    while not list(out.glob(".*partial*")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, output
    assert not out.exists() or not list(out.iterdir())
