"""eval, model serve and chat through vLLM's CPU build (hardware.rollout_engine=vllm on hardware=cpu), on a trained
run (the session's quickstart SFT run): the answers are those trainctl's own sampler gives, served to the official
`openai` client and in the terminal chat; and vLLM's server and engine end with trainctl, however it ends (issue
60: SIGTERM, SIGKILL)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.inference.test_server import LEFT_WITHIN, ServeProcess, end
from trainctl.facts.vllm import RPC_FOLDER

VLLM = ("hardware.rollout_engine=vllm",)
# greedy answers of the two engines on the 64 test prompts: vLLM's CPU kernels (oneDNN GEMMs, its own attention) sum
# in another order than torch's; a near-tie between two tokens can then go the other way, and the answers part there
MIN_EQUAL = 60


def _samples(out: Path) -> list[dict]:
    (samples,) = (out / "samples" / "arith").glob("*.jsonl")
    return [json.loads(line) for line in samples.read_text().splitlines()]


def _eval(home, run, out: Path, *words: str) -> list[dict]:
    """`trainctl eval RUN WORDS --out OUT` in a process of its own, as a user runs it, in the session's home."""
    argv = [sys.executable, "-m", "trainctl", "eval", str(run.path), *words, "--out", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=home.env(), cwd=run.work)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "INFO" not in done.stdout + done.stderr, "vLLM's start-up log is quiet in eval"
    return _samples(out)


@pytest.fixture(scope="module")
def evals(real_home, sft_run, tmp_path_factory) -> dict[str, list[dict]]:
    """Greedy `trainctl eval runs/sft` on the whole test split (64 prompts), with each engine."""
    return {
        "hf": _eval(real_home, sft_run, tmp_path_factory.mktemp("eval-hf")),
        "vllm": _eval(real_home, sft_run, tmp_path_factory.mktemp("eval-vllm"), *VLLM),
    }


def test_greedy_eval_on_vllm_answers_as_trainctls_sampler(evals, record_property):
    hf, vllm = evals["hf"], evals["vllm"]
    assert len(hf) == len(vllm) == 64
    assert [s["prompt"] for s in hf] == [s["prompt"] for s in vllm]
    equal = sum(a["response"] == b["response"] for a, b in zip(hf, vllm, strict=True))
    record_property("equal_greedy_answers", f"{equal}/64")
    print(f"greedy answers equal on {equal} of 64 test prompts")
    differ = [(a["response"], b["response"]) for a, b in zip(hf, vllm, strict=True) if a["response"] != b["response"]]
    assert equal >= MIN_EQUAL, differ
    # the scores follow the answers
    assert sum(s["reward"] for s in vllm) == pytest.approx(sum(s["reward"] for s in hf), abs=(64 - equal) * 1.0)


def _vllms(started: list[str]) -> None:
    """vLLM's server and its engine core were among what trainctl started (else the test proves nothing)."""
    assert any("vllm.entrypoints.openai.api_server" in p for p in started) or any("EngineCore" in p for p in started)


def test_model_serve_on_vllm_answers_the_openai_client_as_eval_and_ends_on_sigterm(evals, real_home, sft_run):
    import psutil
    from openai import OpenAI

    server = ServeProcess(str(sft_run.path), *VLLM, "--port", "0", env=real_home.env())
    try:
        client = OpenAI(base_url=server.url(timeout=600), api_key="none")
        # the server's temporary files go to a folder of its own in trainctl's cache (trainctl.scratch), not /tmp
        children = psutil.Process(server.proc.pid).children()
        (scratch,) = {Path(p.environ()["TMPDIR"]) for p in children if "TMPDIR" in p.environ()}
        assert scratch.parent == real_home.cache / "tmp" and scratch.is_dir(), scratch
        (name,) = [m.id for m in client.models.list()]
        for s in evals["vllm"][:4]:
            r = client.chat.completions.create(model=name, messages=s["prompt"])
            assert r.choices[0].message.content == s["response"]
            assert r.usage.completion_tokens == s["response_tokens"]
    finally:
        # what systemd, Docker and `kill` send: vLLM's server used to stay up, re-parented to PID 1 (issue 60)
        code, started, left = server.end(signal.SIGTERM)
    assert code == 130 and "Stopped (SIGTERM)." in server.output, server.output[-3000:]
    assert "with vLLM's OpenAI server" in server.output
    # its engine's process forked from the server, not a fresh Python importing torch and vLLM again (~15 s of CPU)
    assert "trainctl: vLLM's engine process forked from its server, not spawned" in server.output
    _vllms(started)
    assert not left, f"still running {LEFT_WITHIN:g} s after SIGTERM: {left}"
    assert not scratch.exists(), "the server's temporary folder went with it"


def test_model_serve_on_vllm_leaves_nothing_when_killed(real_home, sft_run):
    """kill -9 of trainctl (the OOM killer): vLLM's server gets its parent-death signal, and the command's watchdog
    stops its EngineCore, which outlived a SIGKILL of the server (measured)."""
    server = ServeProcess(str(sft_run.path), *VLLM, "--port", "0", env=real_home.env())
    server.url(timeout=600)
    sockets = _unix_sockets(server.proc.pid)
    code, started, left = server.end(signal.SIGKILL)
    assert code == -signal.SIGKILL
    _vllms(started)
    assert not left, f"still running {LEFT_WITHIN:g} s after SIGKILL: {left}"
    # vLLM's ZeroMQ sockets between its server and engine, which a kill leaves behind: in trainctl's cache, not /tmp
    rpc = real_home.cache / RPC_FOLDER
    assert sockets and all(Path(s).parent == rpc for s in sockets), sockets


def _unix_sockets(pid: int) -> list[str]:
    """The paths of the Unix sockets (bound or connected) of a process and its children named by a uuid4: vLLM's"""
    import psutil

    family = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    paths = {c.laddr or c.raddr for p in family for c in p.net_connections(kind="unix")}
    return sorted(p for p in paths if p and _UUID.fullmatch(Path(p).name))


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}")


def test_chat_on_vllm_answers_as_eval_and_leaves_nothing_when_killed(evals, real_home, sft_run):
    """The chat's answer is eval's; then, its input still open, kill -9: nothing it started is left. On the CPU
    vLLM's engine core runs in trainctl's own process (VLLM_ENABLE_V1_MULTIPROCESSING=0, trainctl.facts.vllm), so
    what it started is the command's watchdog, which must end too."""
    first = evals["vllm"][0]
    question = first["prompt"][-1]["content"]
    chat = subprocess.Popen(
        [sys.executable, "-m", "trainctl", "chat", str(sft_run.path), *VLLM, "--json"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=real_home.env(),
    )
    try:
        chat.stdin.write(question + "\n")
        chat.stdin.flush()
        answer = json.loads(chat.stdout.readline() or "{}")
    finally:
        code, started, left = end(chat, signal.SIGKILL)
    stderr = chat.stderr.read()
    assert answer.get("answer") == first["response"], stderr[-3000:]
    assert "INFO" not in stderr, "vLLM's start-up log is quiet in the chat"
    assert code == -signal.SIGKILL
    assert any("trainctl.launchers.tether" in p for p in started), started
    assert not left, f"still running {LEFT_WITHIN:g} s after SIGKILL: {left}"
