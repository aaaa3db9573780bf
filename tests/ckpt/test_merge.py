"""`ckpt merge` on real checkpoints: FSDP shards at world size 1 and 2, TRL full and LoRA, ART adapters.
Every output is reloaded with transformers, compared with what was trained, and used to generate."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from tests.ckpt.conftest import LAST, make_adapter
from trainctl.ckpt.layout import list_checkpoints


def _load(folder):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)


def _generates(folder) -> str:
    model, tok = _load(folder)
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 3?"}], tokenize=False, add_generation_prompt=True
    )
    ids = tok(prompt, return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=6, do_sample=False)
    assert out.shape[1] > ids["input_ids"].shape[1]
    return tok.decode(out[0])


def _full_from_shards(step, world):
    import torch.distributed.tensor

    parts = [torch.load(step / f"model_world_size_{world}_rank_{r}.pt", weights_only=True) for r in range(world)]
    full = {}
    for k, t in parts[0].items():
        if hasattr(t, "_local_tensor"):
            full[k] = torch.cat([p[k]._local_tensor for p in parts], dim=0)
        else:
            full[k] = t
    return full


@pytest.mark.parametrize("world", [1, 2])
def test_merge_fsdp_shards(world, cli, sft_runs, tmp_path):
    out = tmp_path / "merged"
    result = cli("ckpt", "merge", str(sft_runs[world]), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "verified" in result.stdout and "keeping the trained dtype fp32" in result.stderr
    assert {"config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja"} <= {
        p.name for p in out.iterdir()
    }
    assert not list(tmp_path.glob(".merged.partial-*"))
    expected = _full_from_shards(sft_runs[world] / "checkpoints" / f"global_step_{LAST[world]}", world)
    model, _ = _load(out)
    got = model.state_dict()
    for k, v in expected.items():
        assert torch.equal(got[k], v), k  # fp32 in, fp32 out: exact
    assert json.loads((out / "config.json").read_text())["dtype"] == "float32"
    _generates(out)


def test_merge_bf16_is_bit_identical_to_verls_merger(cli, sft_runs, tmp_path):
    step = sft_runs[2] / "checkpoints" / "global_step_4"
    ours, theirs = tmp_path / "ours", tmp_path / "verl"
    assert cli("ckpt", "merge", str(step), "--out", str(ours), "--dtype", "bf16").exit_code == 0
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "verl.model_merger",
            "merge",
            "--backend",
            "fsdp",
            "--local_dir",
            str(step),
            "--target_dir",
            str(theirs),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    from safetensors.torch import load_file

    a, b = load_file(ours / "model.safetensors"), load_file(theirs / "model.safetensors")
    assert set(a) == set(b)
    for k in a:
        assert a[k].dtype == b[k].dtype == torch.bfloat16
        assert torch.equal(a[k].view(torch.int16), b[k].view(torch.int16)), k


def test_large_models_are_sharded_with_an_index(cli, sft_runs, tmp_path):
    out = tmp_path / "sharded"
    result = cli("ckpt", "merge", str(sft_runs[1]), "--out", str(out), "--max-shard-size", "0.0002")
    assert result.exit_code == 0, result.output
    index = json.loads((out / "model.safetensors.index.json").read_text())
    files = set(index["weight_map"].values())
    assert len(files) > 1 and all((out / f).is_file() for f in files)
    _generates(out)


def test_merge_trl_full_checkpoint(cli, dpo_runs, tmp_path):
    out = tmp_path / "dpo-full"
    result = cli("ckpt", "merge", str(dpo_runs["full"]), "--out", str(out), "--dtype", "bf16")
    assert result.exit_code == 0, result.output
    model, _ = _load(out)
    trained, _ = _load(list_checkpoints(dpo_runs["full"]).latest.path)
    for k, v in trained.state_dict().items():
        assert torch.equal(model.state_dict()[k], v.to(torch.bfloat16)), k
    _generates(out)


def _peft_reference(base, adapter):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    return PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), adapter).merge_and_unload()


def test_merge_trl_lora_folds_the_adapter(cli, dpo_runs, tiny_model_dir, tmp_path):
    step = dpo_runs["lora"] / "checkpoints" / "checkpoint-16"
    out = tmp_path / "dpo-lora"
    result = cli("ckpt", "merge", str(step), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "LoRA r=8 alpha=16 folded into" in result.stderr and "LoRA changed" in result.stdout
    merged, _ = _load(out)
    reference = _peft_reference(tiny_model_dir, step).state_dict()
    base, _ = _load(tiny_model_dir)
    changed = 0
    for k, v in merged.state_dict().items():
        torch.testing.assert_close(v, reference[k], atol=1e-6, rtol=1e-5)
        changed += not torch.equal(v, base.state_dict()[k])
    assert changed > 0, "the merged model must differ from its base"
    _generates(out)


def test_merge_a_reward_models_adapter_writes_the_classifier(cli, tiny_model_dir, tmp_path):
    """algorithm=rm lora=r8: PEFT adapters of a one-label classifier (task SEQ_CLS) with its new head saved whole.
    The merge is that classifier, as PEFT's own merge makes it, and it passes reward=model's checks."""
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from trainctl.backends.rewards.base import NamedModel
    from trainctl.backends.rewards.model import classifier_problems

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_model_dir, num_labels=1)
    config = LoraConfig(task_type="SEQ_CLS", r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    peft_model = get_peft_model(model, config)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name or "score" in name:
                p.normal_(0, 0.05)
    adapter = tmp_path / "rm-adapter"
    peft_model.save_pretrained(adapter)
    tok.save_pretrained(adapter)
    out = tmp_path / "rm"
    result = cli("ckpt", "merge", str(adapter), "--out", str(out))
    assert result.exit_code == 0, result.output
    written = json.loads((out / "config.json").read_text())
    assert written["architectures"] == ["Qwen2ForSequenceClassification"] and written["id2label"] == {"0": "LABEL_0"}
    assert written["pad_token_id"] == tok.pad_token_id

    base = AutoModelForSequenceClassification.from_pretrained(tiny_model_dir, num_labels=1)
    base.config.pad_token_id = tok.pad_token_id
    reference = PeftModel.from_pretrained(base, adapter).merge_and_unload().eval()
    merged = AutoModelForSequenceClassification.from_pretrained(out).eval()
    batch = tok(["What is 2 + 3? 2 + 3 = 5\n#### 5", "What is 7 * 8?"], padding=True, return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(merged(**batch).logits, reference(**batch).logits, atol=1e-6, rtol=1e-5)
    assert classifier_problems(NamedModel("reward.model", str(out), out, None, True)) == []


def test_merge_art_adapter_finds_its_base_in_model_json(cli, art_model, tiny_model_dir, tmp_path):
    out = tmp_path / "art"
    result = cli("ckpt", "merge", str(art_model), "--out", str(out))  # the latest: checkpoints/0002
    assert result.exit_code == 0, result.output
    reference = _peft_reference(tiny_model_dir, art_model / "checkpoints" / "0002").state_dict()
    merged, _ = _load(out)
    for k, v in merged.state_dict().items():
        torch.testing.assert_close(v, reference[k], atol=1e-6, rtol=1e-5)
    _generates(out)


def test_a_lora_merge_that_equals_its_base_is_an_error(cli, tiny_model_dir, tmp_path):
    adapter = make_adapter(tiny_model_dir, tmp_path / "untrained", seed=0, zero=True)
    out = tmp_path / "out"
    result = cli("ckpt", "merge", str(adapter), "--out", str(out))
    assert result.exit_code == 1
    assert "equals its base model" in result.stderr and "lora_B is zero" in result.stderr
    assert not out.exists() and not list(tmp_path.glob(".out.*"))


def test_out_is_never_overwritten_without_force(cli, sft_runs, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    result = cli("ckpt", "merge", str(sft_runs[1]), "--out", str(out))
    assert result.exit_code == 1 and "--force" in result.stderr
    assert (out / "keep.txt").read_text() == "mine"
    forced = cli("ckpt", "merge", str(sft_runs[1]), "--out", str(out), "--force")
    assert forced.exit_code == 0, forced.output
    assert not (out / "keep.txt").exists() and (out / "model.safetensors").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def test_dry_run_writes_nothing(cli, sft_runs, tmp_path):
    out = tmp_path / "out"
    result = cli("ckpt", "merge", str(sft_runs[2]), "--out", str(out), "--dry-run")
    assert result.exit_code == 0, result.output
    assert f"Would write {out}" in result.stdout and "50 tensors" in result.stdout
    assert not out.exists()


def test_an_interrupted_merge_leaves_nothing(cli, sft_runs, tmp_path, monkeypatch):
    import trainctl.ckpt.merge as merge_mod

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(merge_mod, "verify_written", interrupted)
    out = tmp_path / "out"
    result = cli("ckpt", "merge", str(sft_runs[1]), "--out", str(out))
    assert result.exit_code == 130
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith((".out", "out"))]


def _lora_only_step(tiny_model_dir, tmp_path, name_or_path: str | None):
    """verl's layout for a LoRA run saved with checkpoint.save_lora_only: the shards hold lora_A/B alone."""
    from safetensors.torch import load_file

    adapter = make_adapter(tiny_model_dir, tmp_path / "adapter", seed=3)
    tensors = load_file(adapter / "adapter_model.safetensors")
    step = tmp_path / "global_step_7"
    (step / "huggingface").mkdir(parents=True)
    shard = {k.replace(".weight", ".default.weight"): v for k, v in tensors.items()}  # names inside a PeftModel
    torch.save(shard, step / "model_world_size_1_rank_0.pt")
    (step / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
    (step / "lora_train_meta.json").write_text(json.dumps({"r": 4, "lora_alpha": 8, "task_type": "CAUSAL_LM"}))
    config = json.loads((tiny_model_dir / "config.json").read_text())
    if name_or_path:
        config["_name_or_path"] = name_or_path
    (step / "huggingface" / "config.json").write_text(json.dumps(config))
    for f in tiny_model_dir.glob("tokenizer*"):
        (step / "huggingface" / f.name).write_bytes(f.read_bytes())
    return step, adapter


@pytest.mark.parametrize("how", ["name_or_path", "--base"])
def test_merge_verl_lora_only_shards_into_the_base(how, cli, tiny_model_dir, tmp_path):
    step, adapter = _lora_only_step(tiny_model_dir, tmp_path, str(tiny_model_dir) if how == "name_or_path" else None)
    listed = cli("ckpt", "ls", str(step))
    assert listed.exit_code == 0 and "4/8" in listed.stdout
    out = tmp_path / "out"
    args = ["--base", str(tiny_model_dir)] if how == "--base" else []
    result = cli("ckpt", "merge", str(step), "--out", str(out), *args)
    assert result.exit_code == 0, result.output
    reference = _peft_reference(tiny_model_dir, adapter).state_dict()
    merged, _ = _load(out)
    for k, v in merged.state_dict().items():
        torch.testing.assert_close(v, reference[k], atol=1e-6, rtol=1e-5)
    _generates(out)


def test_lora_only_shards_without_a_base_say_how_to_give_one(cli, tiny_model_dir, tmp_path):
    step, _ = _lora_only_step(tiny_model_dir, tmp_path, None)
    result = cli("ckpt", "merge", str(step), "--out", str(tmp_path / "out"))
    assert result.exit_code == 1 and "cannot find the base model" in result.stderr and "--base DIR" in result.stderr
    assert not (tmp_path / "out").exists()


# merging onto a disk that fills up, for real: a small tmpfs (tests/full_disk.py). The checkpoint: the tiny model as a
# TRL-style checkpoint-1 (50 tensors, 725 KB at fp32)
_FILL_DURING_MERGE = """
import sys
from pathlib import Path
from trainctl.ckpt.layout import CheckpointError
from trainctl.ckpt.merge import merge, plan_merge

ckpt, out = Path(sys.argv[1]), Path(sys.argv[2])
prepared = plan_merge(ckpt, out, force=True)  # there is room: the check before writing passes
filled = []

def fill(done, total):  # after the first tensor, someone else fills the disk
    if not filled:
        filled.append(done)
        with open(out.parent / "filler", "wb") as f:
            try:
                while True:
                    f.write(b"x" * 65536)
                    f.flush()
            except OSError as e:
                print("filled:", e.strerror, flush=True)

try:
    merge(prepared, progress=fill)
except CheckpointError as e:
    print("Error:", e.message)
    print("Hint:", e.hint)
    sys.exit(1)
"""


def _checkpoint(tiny_model_dir, tmp_path):
    import shutil

    return shutil.copytree(tiny_model_dir, tmp_path / "run" / "checkpoint-1")


def test_a_merge_that_does_not_fit_is_refused_before_a_byte_is_written(cli, tiny_model_dir, tmp_path):
    import os

    from tests.full_disk import run_on_small_disk

    ckpt = _checkpoint(tiny_model_dir, tmp_path)
    merge = f"{sys.executable} -m trainctl ckpt merge {ckpt} --out $DISK/tiny-hf"
    disk = run_on_small_disk(tmp_path / "disk", "256k", merge, dict(os.environ))
    assert disk.returncode == 1, disk.output
    import re

    assert re.search(
        r"Error: not enough disk space for \S+/tiny-hf: the merged model needs about [0-9.]+ KB, and "
        r"\S+ has 26[0-9.]+ KB free",
        disk.output,
    ), disk.output
    assert "Nothing was written." in disk.output and "--out /other/disk/NAME" in disk.output
    assert disk.files == [], "nothing on the disk"


def test_a_disk_that_fills_up_during_a_merge_keeps_the_model_it_held(tiny_model_dir, tmp_path):
    """--force over a model already there: the disk fills after the first tensor is written; the old model stays,
    whole, and the partial one goes."""
    import os

    from tests.full_disk import run_on_small_disk

    ckpt = _checkpoint(tiny_model_dir, tmp_path)
    script = (
        "mkdir $DISK/tiny-hf && echo mine > $DISK/tiny-hf/keep.txt && "
        f"{sys.executable} -c {_quote(_FILL_DURING_MERGE)} {ckpt} $DISK/tiny-hf"
    )
    disk = run_on_small_disk(tmp_path / "disk", "2m", script, dict(os.environ))
    assert disk.returncode == 1, disk.output
    assert "filled: No space left on device" in disk.output, disk.output
    assert "Error: the disk filled up while merging into " in disk.output, disk.output
    assert "The partial model was removed: nothing was written." in disk.output
    assert disk.files == ["filler", "tiny-hf/", "tiny-hf/keep.txt"], disk.files


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)
