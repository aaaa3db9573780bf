"""Issue 28: `trainctl model serve` on CPU against `transformers serve`, on the same model (the tiny model, built
here) and the same requests: chat completions of the arith test prompts (their messages, through the chat template),
greedy, 64 new tokens at most.

  time to the first answer   from starting the server's command to the first chat completion it returns (the
                             client retries until the server answers), the commands run alternately, median of
                             BENCH_REPS (default 3), after one warm-up start of each
  tokens/s, 8 concurrent     8 chat completions sent at once (one thread each), completion tokens (as each server's
                             `usage` counts them) over the wall time until the last answer; the servers take turns,
                             median of BENCH_REPS rounds after a warm-up round each

Baselines: `transformers serve --device cpu MODEL` as it starts by default (one request at a time), and with
`--continuous-batching` (paged attention; one generation config for the whole batch). Also reported: how many of the
8 greedy answers equal the answer `trainctl eval` scores for the prompt (trainctl's sampler, which eval uses, must say
8 of 8).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from common import VENV_BIN, Row, report, reps

MAX_TOKENS = int(os.environ.get("BENCH_SERVE_TOKENS", 64))
CONCURRENT = 8


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url: str, body: dict, timeout: float = 300) -> dict:
    request = urllib.request.Request(
        f"{url}/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as r:
        return json.loads(r.read())


class Server:
    """A server command on a free port; `start` returns once it has answered a first chat completion."""

    def __init__(self, name: str, argv: list[str], model_id: str, env: dict, port: int):
        self.name, self.argv, self.model_id, self.env, self.port = name, argv, model_id, env, port
        self.url = f"http://127.0.0.1:{port}/v1"
        self.proc: subprocess.Popen | None = None

    def start(self, messages: list[dict]) -> float:
        started = time.perf_counter()
        self.proc = subprocess.Popen(self.argv, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: {' '.join(self.argv)}")
            try:
                self.ask(messages)
                return time.perf_counter() - started
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.05)

    def ask(self, messages: list[dict]) -> dict:
        body = {"model": self.model_id, "messages": messages, "max_tokens": MAX_TOKENS, "temperature": 0}
        return _post(self.url, body)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def concurrent(self, prompts: list[list[dict]]) -> tuple[float, list[dict]]:
        """(completion tokens per second, the answers) of all prompts sent at once."""
        answers: list[dict] = [{}] * len(prompts)

        def one(i: int) -> None:
            answers[i] = self.ask(prompts[i])

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - started
        tokens = sum(a["usage"]["completion_tokens"] for a in answers)
        return tokens / seconds, answers


def _setup(root: Path) -> tuple[dict, Path, list[list[dict]], list[str]]:
    """The tiny model and the arith data in a home of their own; the prompts and eval's greedy answers to them."""
    env = {
        **os.environ,
        "TRAINCTL_HOME": str(root / "home"),
        "TRAINCTL_CACHE": str(root / "cache"),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
    }
    trainctl = [str(VENV_BIN / "python"), "-m", "trainctl"]
    for args in (["model", "init", "tiny"], ["data", "prep", "arith"]):
        subprocess.run([*trainctl, *args], env=env, check=True, capture_output=True)
    out = root / "eval"
    limit = str(CONCURRENT)
    subprocess.run([*trainctl, "eval", "tiny", "--limit", limit, "--out", str(out)], env=env, check=True,
                   capture_output=True)  # fmt: skip
    samples = [json.loads(line) for line in (out / "samples" / "arith" / "tiny.jsonl").read_text().splitlines()]
    return env, root / "home" / "models" / "tiny", [s["prompt"] for s in samples], [s["response"] for s in samples]


def main() -> list[Row]:
    n = reps(3)
    with tempfile.TemporaryDirectory() as tmp:
        env, folder, prompts, eval_answers = _setup(Path(tmp))
        python = str(VENV_BIN / "python")
        transformers = str(VENV_BIN / "transformers")

        def servers() -> dict[str, Server]:
            ports = [_free_port() for _ in range(3)]
            serve = [python, "-m", "trainctl", "model", "serve", "tiny"]
            cb = [transformers, "serve", "--device", "cpu", "--continuous-batching"]
            return {
                "trainctl": Server("trainctl model serve", [*serve, "--port", str(ports[0])], "tiny", env, ports[0]),
                "transformers": Server(
                    "transformers serve",
                    [transformers, "serve", "--device", "cpu", "--port", str(ports[1]), str(folder)],
                    str(folder),
                    env,
                    ports[1],
                ),
                "transformers-cb": Server(
                    "transformers serve --continuous-batching",
                    [*cb, "--port", str(ports[2]), str(folder)],
                    str(folder),
                    env,
                    ports[2],
                ),
            }

        # time to the first answer: each command started, asked, stopped; alternately
        first: dict[str, list[float]] = {"trainctl": [], "transformers": []}
        for rep in range(n + 1):
            for name in first:
                server = servers()[name]
                try:
                    seconds = server.start(prompts[0])
                finally:
                    server.stop()
                if rep:  # the first start of each warms the file cache
                    first[name].append(seconds)
                    print(f"  first answer, {server.name}: {seconds:.2f} s", flush=True)

        # tokens/s under 8 concurrent requests: all servers up, taking turns
        running = servers()
        rates: dict[str, list[float]] = {k: [] for k in running}
        same: dict[str, int] = {}
        try:
            for server in running.values():
                server.start(prompts[0])
                _, answers = server.concurrent(prompts)  # warm-up round
                texts = [a["choices"][0]["message"]["content"] for a in answers]
                same[server.name] = sum(t == e for t, e in zip(texts, eval_answers, strict=True))
            for _ in range(n):
                for name, server in running.items():
                    rate, _ = server.concurrent(prompts)
                    rates[name].append(rate)
                    print(f"  {CONCURRENT} concurrent, {server.name}: {rate:.0f} tokens/s", flush=True)
        finally:
            for server in running.values():
                server.stop()

    med_first = {k: statistics.median(v) for k, v in first.items()}
    med_rate = {k: statistics.median(v) for k, v in rates.items()}
    agree = ", ".join(f"{name}: {k}/{CONCURRENT}" for name, k in same.items())
    rows = [
        Row("model serve: start to the first answer vs transformers serve", med_first["trainctl"],
            med_first["transformers"], kind="overhead", note=f"median of {n}; ratio = trainctl / transformers"),
        Row(f"model serve: tokens/s, {CONCURRENT} concurrent requests vs transformers serve", med_rate["trainctl"],
            med_rate["transformers"], kind="overhead", unit="tok/s",
            note=f"median of {n}; ratio = trainctl / transformers (> 1: trainctl faster); greedy answers equal to "
            f"eval's: {agree}"),
        Row(f"model serve: tokens/s, {CONCURRENT} concurrent vs transformers serve --continuous-batching",
            med_rate["trainctl"], med_rate["transformers-cb"], kind="overhead", unit="tok/s",
            note=f"median of {n}; ratio = trainctl / transformers"),
    ]  # fmt: skip
    report("model_serve", rows)
    return rows


if __name__ == "__main__":
    main()
