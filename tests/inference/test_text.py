"""Streamed text: what is shown token by token adds up to the answer, never shows a stop string or the start of
tool-call markup, and waits for a character's last byte; and the vLLM command line the GPU path runs."""

from __future__ import annotations

import pytest

from trainctl.inference.text import TextStream, cut_at_stop


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _stream(tokenizer, text: str, **kwargs) -> tuple[TextStream, list[str]]:
    stream = TextStream(tokenizer, **kwargs)
    shown = [stream.push([t]) for t in tokenizer.encode(text)]
    return stream, shown


def test_the_pieces_add_up_to_the_text_and_wait_for_whole_characters(tokenizer):
    text = "What is 12 + 30? It is 42 — é 😀.\n#### 42"
    _, shown = _stream(tokenizer, text)
    assert "".join(shown) == text
    assert all("\ufffd" not in piece for piece in shown), shown  # a character split over tokens is shown whole


def test_a_stop_string_is_never_shown_not_even_its_start(tokenizer):
    text = "12 + 30 = 42\n#### 42 and more"
    stream, shown = _stream(tokenizer, text, stops=["\n####"])
    assert "".join(shown) == "12 + 30 = 42"
    assert cut_at_stop(tokenizer.decode(tokenizer.encode(text)), ["\n####"]) == "12 + 30 = 42"
    assert stream.finish("12 + 30 = 42") == ""


def test_tool_call_markup_waits_for_the_parser(tokenizer):
    text = 'Let me compute.\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "12 + 30"}}\n</tool_call>'
    stream, shown = _stream(tokenizer, text, markers=["<tool_call>"])
    assert "".join(shown) == "Let me compute.\n"
    assert stream.finish("Let me compute.") == ""  # what the parser left of the text: nothing new to show
    stream, shown = _stream(tokenizer, "<tool_call>\n{}", markers=["<tool_call>"])
    assert "".join(shown) == "" and stream.finish("<tool_call>\n{}") == "<tool_call>\n{}"  # unparsed: shown at last


def test_the_vllm_command_carries_the_runs_settings_and_no_secret(tiny_model, monkeypatch):
    from trainctl.inference import vllm
    from trainctl.inference.model import prepare

    monkeypatch.setenv("SERVE_TOKEN", "tok-secret-value")
    served = prepare("tiny", ["hardware=1gpu", "temperature=0.5", "max_tokens=32"])
    assert served.engine == "vllm"
    argv = vllm.command(served, tiny_model, "127.0.0.1", 8123)
    flags = dict(zip(argv[3::2], argv[4::2], strict=False))
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert flags["--model"] == str(tiny_model) and flags["--served-model-name"] == "tiny"
    assert flags["--port"] == "8123" and flags["--gpu-memory-utilization"] == "0.4"
    overrides = __import__("json").loads(argv[argv.index("--override-generation-config") + 1])
    assert overrides == {"temperature": 0.5, "top_p": 1.0, "top_k": -1, "max_new_tokens": 32}
    assert argv[argv.index("--tool-call-parser") + 1] == "hermes"
    assert "tok-secret-value" not in " ".join(argv)


def test_on_the_cpu_vllm_serves_in_fp32_eagerly_with_its_cpu_settings(tiny_model, monkeypatch):
    from trainctl.inference import vllm
    from trainctl.inference.model import prepare

    for name in ("VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND", "VLLM_CACHE_ROOT", "VLLM_RPC_BASE_PATH"):
        monkeypatch.delenv(name, raising=False)
    served = prepare("tiny", ["hardware=cpu", "hardware.rollout_engine=vllm"])
    argv = vllm.command(served, tiny_model, "127.0.0.1", 8123)
    assert argv[argv.index("--dtype") + 1] == "float32" and "--enforce-eager" in argv
    assert "--gpu-memory-utilization" not in argv and "--tensor-parallel-size" not in argv
    env = vllm.environment("cpu", base={})
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1" and env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    # its caches and config under trainctl's cache, not ~/.cache/vllm and ~/.config/vllm
    from trainctl.paths import cache_dir

    assert env["VLLM_CACHE_ROOT"] == str(cache_dir() / "vllm") and env["VLLM_NO_USAGE_STATS"] == "1"
    assert env["VLLM_RPC_BASE_PATH"] == str(cache_dir() / "vllm-rpc")
