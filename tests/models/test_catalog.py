"""`trainctl model ls` and `model rm`: what is on disk, and removing it safely."""

from __future__ import annotations

import json
import shutil


def test_ls_lists_options_and_other_folders(cli, tiny_model, isolated):
    other = isolated / "models" / "someone--thing"
    shutil.copytree(tiny_model, other)
    (other / "trainctl-model.json").write_text(json.dumps({"repo": "someone/thing", "commit": "a" * 40}))
    broken = isolated / "models" / "half"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    out = cli("model", "ls").stdout
    lines = {ln.split()[0]: ln for ln in out.splitlines()[1:] if ln.strip()}
    assert "complete" in lines["tiny"] and "KB" in lines["tiny"]
    assert "someone/thing" in lines["someone--thing"] and "complete" in lines["someone--thing"]
    assert "incomplete: no weights" in lines["half"]
    assert lines["qwen2.5-7b"].split()[1:4] == ["causal-lm", "Qwen/Qwen2.5-7B-Instruct", "-"], "known, not on disk"


def test_rm_asks_and_removes(cli, tiny_model, isolated):
    refused = cli("model", "rm", "tiny")
    assert refused.exit_code == 2
    assert "removing" in refused.stderr and "--yes" in refused.stderr
    assert tiny_model.exists()
    result = cli("model", "rm", "tiny", "--yes")
    assert result.exit_code == 0, result.output
    assert f"Removed {tiny_model}" in result.stdout and not tiny_model.exists()
    again = cli("model", "rm", "tiny", "--yes")
    assert again.exit_code == 1 and "tiny is not on disk" in again.stderr


def test_rm_keeps_folders_trainctl_did_not_make(cli, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text("{}")
    (mine / "model.safetensors").write_bytes(b"")
    result = cli("model", "rm", str(mine), "--yes")
    assert result.exit_code == 1
    assert f"{mine} was not made by trainctl (no trainctl-model.json): not removing it." in result.stderr
    assert mine.exists()


def test_the_users_own_model_options_are_listed_and_found(cli, tiny_model, isolated, tmp_path):
    """A model option in ./conf or a --config-dir: `model ls` lists it, `model info` and `model rm` find it."""
    from pathlib import Path

    for folder, name in ((Path.cwd() / "conf", "ours"), (tmp_path / "team-conf", "theirs")):
        (folder / "model").mkdir(parents=True)
        (folder / "model" / f"{name}.yaml").write_text(f"defaults:\n  - tiny\n  - _self_\nname: {name}\n")
    listed = cli("model", "ls").stdout
    assert "ours" in listed.split() and "theirs" not in listed.split()
    shutil.copytree(tiny_model, isolated / "models" / "theirs")
    out = cli("model", "ls", "--config-dir", str(tmp_path / "team-conf")).stdout
    lines = {ln.split()[0]: ln for ln in out.splitlines()[1:] if ln.strip()}
    assert "complete" in lines["theirs"] and lines["ours"].split()[1:4] == ["causal-lm", "-", "-"]
    info = cli("model", "info", "theirs", "--config-dir", str(tmp_path / "team-conf"))
    assert info.exit_code == 0 and "Qwen2ForCausalLM" in info.stdout, info.output
    unknown = cli("model", "info", "theirs")
    assert unknown.exit_code == 1 and "unknown model 'theirs'" in unknown.stderr
    removed = cli("model", "rm", "theirs", "--yes", "--config-dir", str(tmp_path / "team-conf"))
    assert removed.exit_code == 0, removed.output
    assert not (isolated / "models" / "theirs").exists()
