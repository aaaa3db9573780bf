"""`trainctl model serve` for real: the official `openai` client against the server on 127.0.0.1, answers compared
token for token with what `trainctl eval` wrote for the same prompts; a tool call parsed back; the token; every
refusal before anything is loaded; and nothing it started outlives it (issue 60)."""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from tests.inference.conftest import eval_samples, served_here
from tests.launch.conftest import model_run  # noqa: F401  the session's GRPO run with lora=r8 (a shared run)


class ServeProcess:
    """`trainctl model serve ...` as a user starts it; its output is collected as it comes."""

    def __init__(self, *args: str, env: dict[str, str]):
        argv = [sys.executable, "-m", "trainctl", "model", "serve", *args]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.lines: list[str] = []
        self.ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.startswith("Ready: "):
                self.ready.set()
        self.ready.set()

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def url(self, timeout: float = 120) -> str:
        assert self.ready.wait(timeout), f"no Ready line in {timeout} s:\n{self.output}"
        found = re.search(r"^Ready: (http://\S+)", self.output, re.M)
        assert found, f"the server did not start:\n{self.output}"
        return found.group(1)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(30)
        self._reader.join(10)
        return code

    def end(self, sig: int) -> tuple[int, list[str], list[str]]:
        """Send trainctl `sig`: (its exit code, the processes it had started, those still there LEFT_WITHIN
        seconds after the signal)."""
        return end(self.proc, sig, self._reader)


# issue 60: what `model serve`, `chat` and `eval` start is gone this long after trainctl got SIGTERM or SIGKILL
LEFT_WITHIN = 10.0


def end(proc: subprocess.Popen, sig: int, reader: threading.Thread | None = None) -> tuple[int, list[str], list[str]]:
    """Send trainctl's process `sig`: (its exit code, the processes it had started, those still there LEFT_WITHIN
    seconds after the signal)."""
    import psutil

    family = psutil.Process(proc.pid).children(recursive=True)
    names = [" ".join(p.cmdline()[:4]) for p in family]
    sent = time.monotonic()
    proc.send_signal(sig)
    code = proc.wait(30)
    left = family
    while left and time.monotonic() - sent < LEFT_WITHIN:
        time.sleep(0.1)
        left = [p for p in left if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    if reader is not None:
        reader.join(10)
    return code, names, [f"{p.pid} {' '.join(p.cmdline()[:4])}" for p in left]


def _get(url: str, headers: dict | None = None) -> tuple[int, dict, dict]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read())


def _assert_answers_equal_eval(client, name: str, samples: list[dict]) -> None:
    for s in samples:
        r = client.chat.completions.create(model=name, messages=s["prompt"])
        choice = r.choices[0]
        assert choice.message.content == s["response"], (choice.message.content, s["response"])
        assert r.usage.completion_tokens == s["response_tokens"]
        assert choice.finish_reason == ("length" if s["truncated"] else "stop")
    # streamed: the longest answer (a trained tiny model may spend all its tokens on ones that decode to nothing)
    longest = max(samples, key=lambda s: len(s["response"]))
    stream = client.chat.completions.create(model=name, messages=longest["prompt"], stream=True)
    pieces = [c.choices[0].delta.content or "" for c in stream if c.choices]
    text = longest["response"]
    if len(text) > 1 and "\ufffd" not in text:  # a character whose bytes never complete is held to the end
        assert len([p for p in pieces if p]) > 1, "streamed in several chunks"
    assert "".join(pieces) == text


def test_serve_answers_what_eval_scored_and_requires_its_token(tiny_model, arith_data, tmp_path):
    from openai import AuthenticationError, OpenAI

    token = "tok-" + secrets.token_urlsafe(24)
    server = ServeProcess("tiny", "--port", "0", "--token-env", "SERVE_TOKEN", env={**os.environ, "SERVE_TOKEN": token})
    try:
        samples = eval_samples("tiny", tmp_path / "eval")  # while the server starts
        url = server.url()
        client = OpenAI(base_url=url, api_key=token)
        assert [m.id for m in client.models.list()] == ["tiny"]
        _assert_answers_equal_eval(client, "tiny", samples)

        # /v1/completions on the prompt as the chat template writes it: the same answer
        from transformers import AutoTokenizer

        text = AutoTokenizer.from_pretrained(tiny_model).apply_chat_template(
            samples[0]["prompt"], tokenize=False, add_generation_prompt=True
        )
        done = client.completions.create(model="tiny", prompt=text)
        assert done.choices[0].text == samples[0]["response"]

        # the token: required on every /v1 route, compared whole
        with pytest.raises(AuthenticationError):
            OpenAI(base_url=url, api_key=token[:-1]).models.list()
        status, headers, body = _get(f"{url}/models")
        assert status == 401 and headers.get("www-authenticate") == "Bearer", (status, headers)
        assert "bearer token is required" in body["error"]["message"]
        status, _, _ = _get(f"{url}/models", {"Authorization": f"Bearer {token}"})
        assert status == 200
        assert _get(url.removesuffix("/v1") + "/health")[0] == 200  # says only that it is up
        # a loopback server answers loopback host names only (DNS rebinding)
        status, _, body = _get(f"{url}/models", {"Authorization": f"Bearer {token}", "Host": "evil.example:80"})
        assert status == 400 and "host" in body["error"]["message"].lower()
    finally:
        code = server.stop()
    assert code == 130, server.output[-3000:]  # stopped by Ctrl-C
    assert "auth: a bearer token, from $SERVE_TOKEN" in server.output
    assert token not in server.output


@pytest.mark.slow  # reads the reward-model run (tests/launch/test_reward.py, slow)
def test_serve_a_lora_grpo_checkpoint_merged_into_the_cache(model_run, monkeypatch, tmp_path):  # noqa: F811
    from openai import OpenAI

    from trainctl.paths import cache_dir

    # the run's home: its config names the tiny model and the tiny reward model it was trained and scored with
    monkeypatch.setenv("TRAINCTL_HOME", str(model_run.home))
    samples = eval_samples(str(model_run.dir), tmp_path / "eval")
    before = sorted(p.name for p in model_run.dir.rglob("*"))
    with served_here(str(model_run.dir)) as server:
        assert server.served.describe().endswith("checkpoint step 2"), server.served.describe()
        assert server.folder.is_relative_to(cache_dir()), server.folder  # merged into the cache, verified
        _assert_answers_equal_eval(OpenAI(base_url=server.url, api_key="unused"), "rm", samples)
    assert sorted(p.name for p in model_run.dir.rglob("*")) == before, "nothing written into the run"


def test_a_tool_call_comes_back_parsed_with_the_runs_parser(tiny_tools_dir, tool_question):
    from openai import OpenAI

    from trainctl.data.tools import calculator_schema
    from trainctl.runtime.tools.calculator import calculate

    tools = [calculator_schema()]
    question = [{"role": "user", "content": tool_question}]
    with served_here(str(tiny_tools_dir)) as server:
        client = OpenAI(base_url=server.url, api_key="unused")
        r = client.chat.completions.create(model="tiny-tools", messages=question, tools=tools)
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls", choice
        (call,) = choice.message.tool_calls
        assert call.type == "function" and call.function.name == "calculator"
        arguments = json.loads(call.function.arguments)
        assert list(arguments) == ["expression"]
        assert "<tool_call>" not in (choice.message.content or "")

        # streamed: the markup is never sent as text; the call comes as a tool_calls delta
        chunks = list(client.chat.completions.create(model="tiny-tools", messages=question, tools=tools, stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        deltas = [t for c in chunks if c.choices for t in (c.choices[0].delta.tool_calls or [])]
        assert "<tool_call>" not in text
        assert [(d.function.name, json.loads(d.function.arguments)) for d in deltas] == [("calculator", arguments)]
        assert chunks[-1].choices[0].finish_reason == "tool_calls"

        # the result sent back renders through the template; tool_choice=none leaves calls unparsed
        follow = [
            *question,
            choice.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": calculate(arguments["expression"])},
        ]
        r = client.chat.completions.create(model="tiny-tools", messages=follow, tools=tools)
        assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
        r = client.chat.completions.create(model="tiny-tools", messages=question, tools=tools, tool_choice="none")
        assert r.choices[0].message.tool_calls is None and "<tool_call>" in r.choices[0].message.content


def test_refusals_come_before_anything_is_loaded(cli, tiny_model, tmp_path):
    # a non-loopback host needs a token, from a variable that is set
    result = cli("model", "serve", "tiny", "--host", "0.0.0.0")
    assert result.exit_code == 2 and "--host 0.0.0.0 would let other machines reach the model" in result.stderr
    assert "--token-env SERVE_TOKEN" in result.stderr
    result = cli("model", "serve", "tiny", "--host", "0.0.0.0", "--token-env", "NO_SUCH_TOKEN_VAR")
    assert result.exit_code == 2 and "NO_SUCH_TOKEN_VAR is not set" in result.stderr

    # a port in use: said at once, with a free one to use instead
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        started = time.monotonic()
        result = cli("model", "serve", "tiny", "--port", str(port))
    assert result.exit_code == 1, result.output
    assert (
        f"port {port} on 127.0.0.1 is in use" in result.stderr and "Hint: choose another port: --port" in result.stderr
    )
    assert "Loading" not in result.output and time.monotonic() - started < 30

    # nothing there
    result = cli("chat", "runs/nope")
    assert result.exit_code == 1 and "runs/nope does not exist" in result.stderr, result.output
    shutil_rm = tiny_model / "config.json"
    shutil_rm.unlink()
    result = cli("model", "serve", "tiny")
    assert result.exit_code == 1 and "model=tiny is not downloaded" in result.stderr
    assert "Hint: trainctl model init tiny" in result.stderr


def test_a_lora_adapter_whose_base_is_gone_is_named(cli, tiny_model, tmp_path):
    import shutil

    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = tmp_path / "base"
    shutil.copytree(tiny_model, base)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base), LoraConfig(r=4, target_modules=["q_proj"]))
    adapter = tmp_path / "runs" / "lora" / "checkpoints" / "checkpoint-5"
    model.save_pretrained(adapter)
    shutil.rmtree(base)
    for command in (("model", "serve"), ("chat",)):
        result = cli(*command, str(adapter), *(["--port", "0"] if command[0] == "model" else []))
        assert result.exit_code == 1, result.output
        assert f"cannot find the base model of the adapter in {adapter}" in result.stderr
        assert str(base) in result.stderr
        assert (
            f"trainctl ckpt merge {adapter} --base DIR --out models/checkpoint-5 && trainctl {' '.join(command)} "
            "models/checkpoint-5" in result.stderr
        )
        assert "Loading" not in result.output


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_nothing_it_started_outlives_it(tiny_model, sig):
    """Issue 60, on trainctl's sampler (the server runs in trainctl's process, and starts no other: nor then its
    watchdog, which starts with a command's first process): what systemd or Docker send, and kill -9, leave nothing
    behind; SIGTERM stops it as Ctrl-C does."""
    server = ServeProcess("tiny", "--port", "0", env=dict(os.environ))
    server.url()
    code, started, left = server.end(sig)
    assert not any("trainctl.launchers.tether" in name for name in started), started
    assert not left, f"still running {LEFT_WITHIN:g} s after {sig.name}: {left}"
    if sig == signal.SIGTERM:
        assert code == 130 and "Stopped (SIGTERM)." in server.output, server.output[-2000:]
    else:
        assert code == -signal.SIGKILL


def test_help_documents_the_exit_codes(cli):
    for command in (("model", "serve"), ("chat",)):
        result = cli(*command, "--help")
        assert result.exit_code == 0 and "Exit codes: 0" in result.stdout


def test_64_concurrent_requests_a_third_streamed_and_cut_off_leave_no_generation_behind(tiny_model, record_property):
    """Issue 48's load: 64 requests at once (chat and completions, some asking for log-probs); a third stream 256
    tokens (EOS ignored) and hang up after a few chunks. Every other request is answered whole; the hung-up ones
    leave the batch at the next step (the tokens generated for them stay within a few steps of what their clients
    read), and the engine goes idle as soon as the last answer is out. Says its figures (latency, RSS)."""
    import http.client
    import statistics
    from concurrent.futures import ThreadPoolExecutor

    import psutil

    cut_after, stream_tokens, answer_tokens = 3, 256, 16
    me = psutil.Process()
    rss = [me.memory_info().rss]
    with served_here("tiny") as server:
        engine = server.service.engine
        host, port = "127.0.0.1", server.port

        def post(path: str, body: dict) -> http.client.HTTPResponse:
            conn = http.client.HTTPConnection(host, port, timeout=120)
            conn.request("POST", f"/v1/{path}", json.dumps(body), {"Content-Type": "application/json"})
            return conn, conn.getresponse()

        def answered(i: int) -> tuple[float, int]:
            start = time.perf_counter()
            if i % 2:
                body = {"prompt": f"What is {i} + {i}?", "max_tokens": answer_tokens, "ignore_eos": True}
                path = "completions"
            else:
                body = {"messages": [{"role": "user", "content": f"What is {i} * 2?"}], "ignore_eos": True,
                        "max_tokens": answer_tokens}  # fmt: skip
                if i % 4 == 0:
                    body.update(logprobs=True, top_logprobs=2)
                path = "chat/completions"
            conn, r = post(path, body)
            reply = json.loads(r.read())
            conn.close()
            assert r.status == 200, reply
            assert reply["usage"]["completion_tokens"] == answer_tokens, reply
            return time.perf_counter() - start, answer_tokens

        def cut_off(i: int) -> tuple[float, int]:
            """Stream, read `cut_after` chunks with content, hang up: (time to the first chunk, chunks read)."""
            start, first, read = time.perf_counter(), None, 0
            body = {"messages": [{"role": "user", "content": f"Count to {i}."}], "stream": True,
                    "max_tokens": stream_tokens, "ignore_eos": True}  # fmt: skip
            conn, r = post("chat/completions", body)
            assert r.status == 200
            while read < cut_after:
                line = r.fp.readline()
                assert line, "the stream ended early"
                if line.startswith(b"data: {") and json.loads(line[6:])["choices"][0]["delta"].get("content"):
                    read += 1
                    first = first or time.perf_counter() - start
            conn.sock.shutdown(socket.SHUT_RDWR)
            conn.close()
            return first, read

        def watch_rss(stop: threading.Event) -> None:
            while not stop.wait(0.05):
                rss.append(me.memory_info().rss)

        stop = threading.Event()
        watcher = threading.Thread(target=watch_rss, args=(stop,), daemon=True)
        watcher.start()
        started = time.perf_counter()
        with ThreadPoolExecutor(64) as pool:
            futures = [pool.submit(cut_off if i % 3 == 0 else answered, i) for i in range(64)]
            results = [(i % 3 == 0, f.result()) for i, f in enumerate(futures)]
        wall = time.perf_counter() - started
        deadline = time.monotonic() + 10
        while (engine.batch.busy or engine._running) and time.monotonic() < deadline:
            time.sleep(0.02)
        idle_after = time.perf_counter() - started - wall
        stop.set()
        watcher.join()
        streams = [r for cut, r in results if cut]
        answers = [r for cut, r in results if not cut]
        assert len(streams) == 22 and len(answers) == 42
        assert not engine.batch.busy and not engine._running, "generation went on after every client was done"
        # what the engine generated: the answers whole, and for each hung-up stream what its client read plus a
        # few steps (the step in flight when the hang-up is noticed); 256 each had they gone on
        generated = engine.stats.tokens
        answered_tokens = sum(n for _, n in answers)
        per_stream = (generated - answered_tokens) / len(streams)
        assert engine.stats.requests == 64 and engine.stats.largest_batch >= 32, engine.stats
        assert per_stream < cut_after + 24, f"{per_stream:.1f} tokens per hung-up stream: they went on generating"
    latencies = sorted(t for t, _ in answers)
    first_chunks = sorted(t for t, _ in streams)
    figures = {
        "wall_s": round(wall, 2),
        "answer_p50_s": round(statistics.median(latencies), 3),
        "answer_p95_s": round(latencies[int(0.95 * (len(latencies) - 1))], 3),
        "stream_first_chunk_p50_s": round(statistics.median(first_chunks), 3),
        "tokens_per_hung_up_stream": round(per_stream, 1),
        "idle_after_last_answer_s": round(max(idle_after, 0.0), 3),
        "largest_batch": engine.stats.largest_batch,
        "rss_before_mb": round(rss[0] / 2**20),
        "rss_peak_mb": round(max(rss) / 2**20),
    }
    record_property("figures", figures)
    print(f"model serve, 64 concurrent (22 streams cut off after {cut_after} chunks): {figures}")


def test_a_whole_answer_whose_client_hangs_up_leaves_the_batch(tiny_model):
    """A non-streamed request sends nothing until its answer is done, so the server watches the connection: a client
    that gives up (a timeout) has its request dropped, not generated to its 512 tokens."""
    import http.client

    with served_here("tiny") as server:
        engine = server.service.engine
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
        body = {"prompt": "What is 2 + 3?", "max_tokens": 512, "ignore_eos": True}
        conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        deadline = time.monotonic() + 60
        while engine.stats.tokens < 4 and time.monotonic() < deadline:  # it is generating
            time.sleep(0.01)
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        at_hang_up = engine.stats.tokens
        while engine.batch.busy and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not engine.batch.busy, "it went on generating for nobody"
        assert engine.stats.tokens - at_hang_up < 24, (at_hang_up, engine.stats.tokens)
        # the server goes on answering
        r = urllib.request.urlopen(
            urllib.request.Request(f"{server.url}/completions", json.dumps({**body, "max_tokens": 2}).encode(),
                                   {"Content-Type": "application/json"}), timeout=60)  # fmt: skip
        assert json.loads(r.read())["usage"]["completion_tokens"] == 2
