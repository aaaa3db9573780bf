"""Model cards and Modelfiles (trainctl.ckpt.card): what they say about a real run, a plain folder, and whose file
they never replace."""

from __future__ import annotations

from trainctl.ckpt.card import MARK, card, modelfile, origin, write_ours
from trainctl.ckpt.layout import list_checkpoints
from trainctl.ckpt.lineage import Lineage


def test_lineage_reads_as_runs_show_tells_it():
    from trainctl.ckpt.card import _lineage

    d = {
        "source": "runs/sft",
        "run": "runs/sft",
        "checkpoint": "runs/sft/checkpoints/global_step_16",
        "step": 16,
        "base": "tiny",
        "merged": "/cache/x",
        "parent": {"source": "runs/a", "run": None, "checkpoint": "ck", "step": None, "base": None, "merged": "m"},
    }
    assert _lineage(d) == Lineage(**d).describe() == "runs/sft step 16 (model=tiny) <- ck"


def test_a_runs_card_names_its_base_settings_metrics_and_command(sft_run):
    checkpoint = list_checkpoints(sft_run.path).latest
    text = card(origin(checkpoint), "merge")
    assert text.startswith("---\nlicense: apache-2.0\nlibrary_name: transformers\ntags: [trainctl, sft]\n---\n")
    assert "# sft (step 48)" in text and "- base model: tiny" in text and MARK in text
    assert "| optim.lr | 0.001 |" in text and "| epochs |" in text
    assert "At step 48:" in text and "- val/loss = " in text
    assert "trainctl train recipe=quickstart run.save_every=16 logger=console" in text


def test_a_folder_outside_any_run_gets_what_its_files_say(tiny_model_dir):
    o = origin(None, tiny_model_dir)
    assert o.run is None and o.base == "tiny" and o.license == "apache-2.0"
    assert "## Training" not in card(o, "gguf")


def test_modelfile_of_a_chatml_model(tiny_model_dir):
    from transformers import AutoTokenizer

    text = modelfile("tiny-f16.gguf", AutoTokenizer.from_pretrained(tiny_model_dir), ["<|im_end|>"])
    assert "FROM ./tiny-f16.gguf\n" in text and "SYSTEM" not in text  # the tiny template adds no system prompt
    assert '{{ end }}<|im_start|>assistant\n"""\nPARAMETER stop "<|im_end|>"\n' in text


def test_write_ours_replaces_only_trainctls_files(tmp_path):
    mine = tmp_path / "README.md"
    assert write_ours(mine, f"<!-- {MARK} -->\none\n") and write_ours(mine, f"<!-- {MARK} -->\ntwo\n")
    assert mine.read_text().endswith("two\n")
    theirs = tmp_path / "Modelfile"
    theirs.write_text("FROM llama3\n")
    assert not write_ours(theirs, "new") and theirs.read_text() == "FROM llama3\n"
