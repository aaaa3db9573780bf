"""`trainctl model pull` against a hub on 127.0.0.1 (tests/models/fake_hub.py): the real huggingface_hub client."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.models.conftest import OPTION, REPO, TAKEN

SHARD = "model-00001-of-00002.safetensors"


@pytest.fixture
def big(hub, repo_files):
    """A repository with a file of several MiB: trainctl writes (and can resume) a download a MiB at a time."""
    from trainctl.models.download import CHUNK

    data = os.urandom(4 * CHUNK + 12345)
    hub.repo("someone/big").add({**repo_files, "pytorch_model.bin": data})
    return data, 2 * CHUNK


BIG = ["model", "pull", "someone/big", "--include", "*.bin"]


def _files(folder) -> set[str]:
    return {
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if p.is_file() and ".cache" not in p.relative_to(folder).parts
    }


def _manifest(folder) -> dict:
    return json.loads((folder / "trainctl-model.json").read_text())


def test_pull_by_option_name_lands_where_train_reads_it(cli, hub, isolated, repo_files):
    result = cli("model", "pull", OPTION)
    assert result.exit_code == 0, result.output
    target = isolated / "models" / OPTION
    assert _files(target) == TAKEN | {"trainctl-model.json"}, "weights, config, tokenizer, template; no duplicates"
    for name in TAKEN:
        assert (target / name).read_bytes() == repo_files[name]
    manifest = _manifest(target)
    assert manifest["complete"] and manifest["repo"] == REPO and manifest["source"] == "Hugging Face"
    assert manifest["commit"] == hub.repo(REPO).refs["main"] and manifest["files"][SHARD] == len(repo_files[SHARD])
    assert f"Pulled {REPO} @ {manifest['commit'][:12]} from Hugging Face ({hub.url}): 10 files" in result.stdout
    assert f"Train on it: trainctl train model={OPTION}" in result.stdout
    assert "note: left out 3 files" in result.stderr and "--include GLOB" in result.stderr

    # the run finds it without a path: no "model not found" warning
    plan = cli("train", f"model={OPTION}", "--dry-run")
    assert plan.exit_code == 0 and "model.path" not in plan.stderr, plan.output
    ls = cli("model", "ls").stdout
    line = next(ln for ln in ls.splitlines() if ln.startswith(OPTION + " "))
    assert "complete" in line and f"main {manifest['commit'][:8]}" in line

    # pulling again downloads nothing: every file is already there and verified
    before = len([r for r in hub.requests if r[0] == "GET" and "/resolve/" in r[1]])
    again = cli("model", "pull", OPTION)
    assert again.exit_code == 0, again.output
    assert "downloading 0 of 10 files (0 B of" in again.stderr
    assert len([r for r in hub.requests if r[0] == "GET" and "/resolve/" in r[1]]) == before


def test_a_repository_id_and_include(cli, hub, isolated, repo_files):
    hub.repo("someone/tiny-chat").add(repo_files)
    result = cli("model", "pull", "someone/tiny-chat", "--include", "*.bin")
    assert result.exit_code == 0, result.output
    target = isolated / "models" / "someone--tiny-chat"
    assert "pytorch_model.bin" in _files(target) and "model-q4.gguf" not in _files(target)
    assert f"Train on it: trainctl train model.path={target}" in result.stdout


def test_dry_run_lists_and_downloads_nothing(cli, hub, isolated):
    result = cli("model", "pull", OPTION, "--dry-run")
    assert result.exit_code == 0, result.output
    assert f"Would download {REPO} @" in result.stdout and SHARD in result.stdout
    assert "10 files" in result.stdout
    assert not (isolated / "models" / OPTION).exists()
    assert not [r for r in hub.requests if "/resolve/" in r[1]]


def test_a_pinned_revision(cli, hub, isolated, repo_files):
    repo = hub.repo(REPO)
    first = repo.refs["main"]
    newer = dict(repo_files, **{"config.json": repo_files["config.json"].replace(b"}", b', "note": "v2"}', 1)})
    second = repo.add(newer, ref="main")
    repo.refs["v1"] = first
    target = isolated / "models" / OPTION

    assert cli("model", "pull", OPTION, "--revision", first).exit_code == 0
    assert _manifest(target)["commit"] == first and b"v2" not in (target / "config.json").read_bytes()
    result = cli("model", "pull", OPTION)
    assert result.exit_code == 0, result.output
    assert _manifest(target)["commit"] == second and b'"note": "v2"' in (target / "config.json").read_bytes()
    assert f"replacing {first[:12]}" in result.stderr or f"({first[:12]}) with {second[:12]}" in result.stderr
    tag = cli("model", "pull", OPTION, "--revision", "v1")
    assert tag.exit_code == 0 and _manifest(target)["commit"] == first

    missing = cli("model", "pull", OPTION, "--revision", "v9")
    assert missing.exit_code == 1
    assert f"Error: {REPO} has no revision 'v9' on {hub.url}." in missing.stderr


def test_a_dropped_connection_resumes_with_a_range_request(cli, hub, isolated, big):
    data, chunk = big
    hub.drop["pytorch_model.bin"] = chunk + 500_000  # the half-received MiB is fetched again
    result = cli(*BIG)
    assert result.exit_code == 0, result.output
    assert hub.ranges("pytorch_model.bin") == ["", f"bytes={chunk}-"]
    assert (isolated / "models" / "someone--big" / "pytorch_model.bin").read_bytes() == data


def test_an_interrupted_pull_resumes_when_run_again(cli, hub, isolated, big):
    """Ctrl-C in the middle of a large file; the next run asks only for the rest of it."""
    data, chunk = big
    hub.stall["pytorch_model.bin"] = chunk + 1_000_000
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainctl", *BIG],
        env={**os.environ, "HF_HUB_OFFLINE": "0"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    target = isolated / "models" / "someone--big"
    partial = target / ".cache" / "trainctl" / "pytorch_model.bin.part"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if partial.is_file() and partial.stat().st_size >= chunk:
            break
        time.sleep(0.05)
    else:
        proc.kill()
        raise AssertionError(f"the download never reached the stall: {proc.communicate()}")
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Interrupted: run the same command again to resume." in err
    assert time.monotonic() - started < 5, "Ctrl-C does not wait for the download threads"
    ls = cli("model", "ls").stdout
    assert "incomplete: the pull did not finish (run it again to resume)" in ls

    del hub.stall["pytorch_model.bin"]
    hub.release.set()
    result = cli(*BIG)
    assert result.exit_code == 0, result.output
    assert hub.ranges("pytorch_model.bin")[-1] == f"bytes={chunk}-"
    assert (target / "pytorch_model.bin").read_bytes() == data
    assert _manifest(target)["complete"]


def test_a_truncated_file_is_caught_and_fetched_again(cli, hub, isolated, repo_files):
    assert cli("model", "pull", OPTION).exit_code == 0
    shard = isolated / "models" / OPTION / SHARD
    shard.write_bytes(repo_files[SHARD][:1000])
    ls = cli("model", "ls").stdout
    assert f"incomplete: {SHARD} is 1000 bytes, expected {len(repo_files[SHARD])}" in ls
    result = cli("model", "pull", OPTION)
    assert result.exit_code == 0, result.output
    assert f"downloading 1 of 10 files ({len(repo_files[SHARD]) / 1000:.1f} KB of" in result.stderr
    assert shard.read_bytes() == repo_files[SHARD]


def test_verification_fails_when_the_hub_disagrees_with_itself(cli, hub, isolated, repo_files):
    real = len(repo_files[SHARD])
    hub.lie_sizes[SHARD] = real + 8
    result = cli("model", "pull", OPTION)
    assert result.exit_code == 1
    assert f"does not match {REPO} at" in result.stderr
    assert f"{SHARD}: the listing says {real + 8:,} bytes, the server sent {real:,}" in result.stderr
    assert not _manifest(isolated / "models" / OPTION)["complete"]


def test_checksum_catches_a_same_size_corruption_and_fetches_it_again(cli, hub, isolated, repo_files):
    assert cli("model", "pull", OPTION).exit_code == 0
    shard = isolated / "models" / OPTION / SHARD
    data = bytearray(repo_files[SHARD])
    data[-1] ^= 0xFF
    shard.write_bytes(bytes(data))
    assert cli("model", "pull", OPTION).exit_code == 0, "sizes alone cannot see it"
    assert shard.read_bytes() != repo_files[SHARD]
    result = cli("model", "pull", OPTION, "--checksum")
    assert result.exit_code == 0, result.output
    assert "downloading 1 of 10 files" in result.stderr
    assert shard.read_bytes() == repo_files[SHARD]


def test_gated_repository_without_and_with_a_token(cli, hub, isolated, monkeypatch):
    hub.repo(REPO).gated_token = "hf_granted_token_123"
    result = cli("model", "pull", OPTION)
    assert result.exit_code == 1
    assert f"Error: {REPO} on {hub.url} is gated or private, and no token was sent." in result.stderr
    assert "set HF_TOKEN (or run `hf auth login`)" in result.stderr and "--source modelscope" in result.stderr

    monkeypatch.setenv("HF_TOKEN", "hf_wrong_token_456")
    wrong = cli("model", "pull", OPTION)
    assert wrong.exit_code == 1 and "the token you have is not granted access" in wrong.stderr
    assert "hf_wrong_token_456" not in wrong.output

    monkeypatch.setenv("HF_TOKEN", "hf_granted_token_123")
    ok = cli("model", "pull", OPTION)
    assert ok.exit_code == 0, ok.output
    target = isolated / "models" / OPTION
    assert "hf_granted_token_123" not in ok.output
    assert not any(b"hf_granted_token_123" in p.read_bytes() for p in target.rglob("*") if p.is_file())


def test_a_missing_repository_and_an_unknown_name(cli, hub):
    result = cli("model", "pull", "nobody/nothing-here")
    assert result.exit_code == 1
    assert f"Error: nobody/nothing-here was not found on {hub.url} (or it is private and no token was sent)." in (
        result.stderr
    )
    unknown = cli("model", "pull", "qwen2.5-7")
    assert unknown.exit_code == 1
    assert "unknown model 'qwen2.5-7'" in unknown.stderr and "Did you mean 'qwen2.5-7b'?" in unknown.stderr


def test_no_room_on_the_disk_is_said_before_downloading(cli, hub, isolated, monkeypatch, repo_files):
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**9, 10**9 - 1000, 1000))
    result = cli("model", "pull", OPTION)
    assert result.exit_code == 1
    assert "Error: not enough disk space at" in result.stderr
    need = sum(len(repo_files[name]) for name in TAKEN) / 1000
    assert f"the download needs {need:.1f} KB, 1.0 KB is free" in result.stderr
    assert "--dir /path/with/room" in result.stderr
    assert not [r for r in hub.requests if "/resolve/" in r[1]]


def test_a_full_disk_mid_download_keeps_what_was_fetched(cli, hub, isolated, big):
    """A file size limit (ulimit -f) stands in for the full disk: the write fails the same way, mid-file."""
    import resource

    data, chunk = big

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (chunk + 1_000_000, resource.RLIM_INFINITY))

    proc = subprocess.run(
        [sys.executable, "-m", "trainctl", *BIG],
        env={**os.environ, "HF_HUB_OFFLINE": "0"},
        preexec_fn=limit,
        capture_output=True,
        text=True,
        timeout=120,
    )
    target = isolated / "models" / "someone--big"
    assert proc.returncode == 1, proc.stderr
    assert f"Error: downloading into {target} stopped: a file grew past" in proc.stderr
    assert "What was downloaded is kept." in proc.stderr and "it resumes where it stopped" in proc.stderr
    result = cli(*BIG)
    assert result.exit_code == 0, result.output
    assert hub.ranges("pytorch_model.bin")[-1].startswith("bytes="), "the second run resumed the partial file"
    assert (target / "pytorch_model.bin").read_bytes() == data


def test_auto_says_when_no_hub_is_reachable(cli, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("MODELSCOPE_DOMAIN", "http://127.0.0.1:9")
    result = cli("model", "pull", OPTION)
    assert result.exit_code == 1
    assert (
        "Error: cannot reach the Hugging Face hub at http://127.0.0.1:9 (it does not answer) "
        "nor ModelScope at http://127.0.0.1:9." in result.stderr
    )
    offline = cli("model", "pull", OPTION, "--source", "hf")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    offline = cli("model", "pull", OPTION, "--source", "hf")
    assert "cannot reach the Hugging Face hub at http://127.0.0.1:9 (HF_HUB_OFFLINE is set)." in offline.stderr


def test_the_tiny_model_is_built_not_pulled(cli):
    result = cli("model", "pull", "tiny")
    assert result.exit_code == 1
    assert "Error: tiny is on no hub: it is built locally." in result.stderr
    assert "Hint: trainctl model init tiny" in result.stderr
