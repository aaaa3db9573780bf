"""A fake Hugging Face hub serving the tiny model (in two shards, with the extra files real repositories carry)
under the repository id the `qwen2.5-0.5b` option names, so `trainctl model pull qwen2.5-0.5b` runs the real client."""

from __future__ import annotations

import json
import struct

import pytest

from tests.models.fake_hub import FakeHub

REPO = "Qwen/Qwen2.5-0.5B-Instruct"  # what conf/model/qwen2.5-0.5b.yaml names
OPTION = "qwen2.5-0.5b"
TAKEN = {
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "model-00001-of-00002.safetensors",
    "model-00002-of-00002.safetensors",
    "model.safetensors.index.json",
    "README.md",
    "LICENSE",
}
SKIPPED = {"pytorch_model.bin", "original/consolidated.00.pth", "model-q4.gguf", ".gitattributes"}


def _split_safetensors(data: bytes) -> dict[str, bytes]:
    """One safetensors file as two shards and the index naming them (byte-level: no torch needed)."""
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    meta = header.pop("__metadata__", {"format": "pt"})
    body = data[8 + n :]
    names = sorted(header, key=lambda k: header[k]["data_offsets"][0])
    halves = [names[: len(names) // 2], names[len(names) // 2 :]]
    files, weight_map = {}, {}
    for i, part in enumerate(halves, 1):
        shard = f"model-0000{i}-of-00002.safetensors"
        new_header, chunks, offset = {"__metadata__": meta}, [], 0
        for name in part:
            start, end = header[name]["data_offsets"]
            chunks.append(body[start:end])
            new_header[name] = {**header[name], "data_offsets": [offset, offset + end - start]}
            offset += end - start
            weight_map[name] = shard
        raw = json.dumps(new_header).encode()
        raw += b" " * (-len(raw) % 8)
        files[shard] = struct.pack("<Q", len(raw)) + raw + b"".join(chunks)
    total = sum(len(c) for c in files.values())
    files["model.safetensors.index.json"] = json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2
    ).encode()
    return files


@pytest.fixture(scope="session")
def repo_files(tiny_model_dir) -> dict[str, bytes]:
    files = {}
    for f in tiny_model_dir.iterdir():
        if f.name == "model.safetensors":
            files.update(_split_safetensors(f.read_bytes()))
        elif f.name != "trainctl-model.json":
            files[f.name] = f.read_bytes()
    files["README.md"] = b"# tiny\n"
    files["LICENSE"] = b"Apache-2.0\n"
    files["pytorch_model.bin"] = b"\0" * 4096
    files["original/consolidated.00.pth"] = b"\0" * 2048
    files["model-q4.gguf"] = b"\0" * 1024
    files[".gitattributes"] = b"*.safetensors filter=lfs\n"
    assert set(files) == TAKEN | SKIPPED
    return files


@pytest.fixture
def hub(repo_files, monkeypatch):
    """The fake hub, with HF_ENDPOINT pointing at it and the hub client allowed online."""
    import huggingface_hub.constants

    with FakeHub() as hub:
        hub.repo(REPO).add(repo_files)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        # huggingface_hub reads HF_HUB_OFFLINE once, at import; the session fixture set it before that
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_PROGRESS_BARS", True)
        yield hub


@pytest.fixture
def modelscope(repo_files, monkeypatch, tmp_path):
    """The fake ModelScope, with MODELSCOPE_DOMAIN pointing at it."""
    from tests.models.fake_modelscope import FakeModelScope

    with FakeModelScope() as hub:
        hub.repos[REPO] = dict(repo_files)
        monkeypatch.setenv("MODELSCOPE_DOMAIN", hub.url)
        monkeypatch.setenv("MODELSCOPE_CACHE", str(tmp_path / "modelscope-cache"))
        yield hub
