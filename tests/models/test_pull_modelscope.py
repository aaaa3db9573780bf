"""`trainctl model pull --source modelscope|auto` against a ModelScope on 127.0.0.1 (tests/models/fake_modelscope.py):
the real modelscope client. Not covered here (no real ModelScope is reachable): tokens for private models, the
redirects to its object storage, and resuming across runs (left to the modelscope client)."""

from __future__ import annotations

import json

from tests.models.conftest import OPTION, REPO, TAKEN


def test_pull_from_modelscope(cli, modelscope, isolated, repo_files):
    result = cli("model", "pull", OPTION, "--source", "modelscope")
    assert result.exit_code == 0, result.output
    target = isolated / "models" / OPTION
    for name in TAKEN:
        assert (target / name).read_bytes() == repo_files[name]
    assert not (target / "pytorch_model.bin").exists()
    manifest = json.loads((target / "trainctl-model.json").read_text())
    assert manifest["complete"] and manifest["source"] == "ModelScope" and manifest["revision"] == "master"
    assert f"Pulled {REPO} @ master from ModelScope ({modelscope.url}): 10 files" in result.stdout
    listing = [p for m, p in modelscope.requests if "/repo/files" in p]
    assert listing and "Revision=master" in listing[0]


def test_auto_falls_back_to_modelscope_and_says_so(cli, modelscope, isolated, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    result = cli("model", "pull", OPTION)
    assert result.exit_code == 0, result.output
    assert (
        "note: the Hugging Face hub at http://127.0.0.1:9 cannot be reached (it does not answer): using ModelScope"
        in result.stderr
    )
    assert "from ModelScope" in result.stdout


def test_a_missing_model_on_modelscope(cli, modelscope):
    result = cli("model", "pull", "nobody/nothing", "--source", "modelscope")
    assert result.exit_code == 1
    assert f"Error: nobody/nothing was not found on ModelScope ({modelscope.url})." in result.stderr


def test_modelscope_unreachable(cli, monkeypatch):
    monkeypatch.setenv("MODELSCOPE_DOMAIN", "http://127.0.0.1:9")
    result = cli("model", "pull", OPTION, "--source", "modelscope")
    assert result.exit_code == 1
    assert "Error: cannot reach ModelScope at http://127.0.0.1:9." in result.stderr
    assert "set MODELSCOPE_DOMAIN to a mirror, or --source hf" in result.stderr
