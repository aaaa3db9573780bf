"""llama.cpp itself, in this process, through the `xllamacpp` wheel (llama.cpp compiled into a Python extension:
no compiler, no checkout): what `ckpt export --to gguf` verifies a file with, and what bench_gguf measures.

xllamacpp embeds llama-server: loading a model starts its HTTP handlers on a loopback port, and llama.cpp's own
tokenizer, chat-template renderer and sampler are reached there (/tokenize, /apply-template, /completion). The port
is bound to 127.0.0.1 and guarded by a random API key for the few seconds a check takes.
"""

from __future__ import annotations

import json
import secrets
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from trainctl.errors import TrainctlError

# the wheel trainctl is tested with (pyproject's llamacpp extra and `make install` pin the same)
PIN = "xllamacpp==2026.10.11549"


def unavailable() -> str | None:
    """None when llama.cpp's wheel loads here, else one line saying why and what to run."""
    try:
        import xllamacpp  # noqa: F401
    except ImportError as e:
        missing = "not installed" if isinstance(e, ModuleNotFoundError) else f"does not load here ({e})"
        return f"llama.cpp's wheel (xllamacpp) is {missing}: pip install '{PIN}'"
    except OSError as e:  # its shared library or libgomp cannot be loaded on this machine
        return f"llama.cpp's wheel (xllamacpp) does not load here ({e})"
    return None


def version() -> str:
    import xllamacpp

    return f"xllamacpp {xllamacpp.__version__}"


@dataclass
class Answer:
    tokens: list[int]
    logprobs: list[float | None]  # each token's raw log-prob (None: llama-server reported none for it)
    stop: str  # llama-server's stop type: "eos" (an end-of-generation token), "limit" (max tokens), ...
    timings: dict  # llama-server's: prompt_per_second, predicted_per_second, ...


class LlamaCpp:
    """A GGUF file loaded by llama.cpp; close() (or `with`) unloads it."""

    def __init__(self, path: Path, n_ctx: int = 1024, threads: int = 1, parallel: int = 1):
        """parallel: requests generated at once (continuous batching), sharing n_ctx."""
        import xllamacpp

        params = xllamacpp.CommonParams()
        params.model.path = str(path)
        params.n_ctx = n_ctx
        params.n_parallel = parallel
        params.cpuparams.n_threads = threads
        params.cpuparams_batch.n_threads = threads
        params.warmup = False
        params.verbosity = -1  # llama.cpp's log lines go to stderr otherwise
        params.port = 0
        self._key = secrets.token_hex(16)
        params.api_keys = [self._key]
        try:
            self._server = xllamacpp.Server(params)
        except Exception as e:
            raise TrainctlError(f"llama.cpp could not load {path}: {str(e).splitlines()[0][:300]}") from None
        self._base = self._server.listening_address

    def __enter__(self) -> LlamaCpp:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._server = None  # its destructor stops llama-server's loop and frees the model

    def _post(self, path: str, body: dict) -> dict:
        req = urllib.request.Request(
            self._base + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self._key}"},
        )
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            raise TrainctlError(f"llama.cpp answered {path} with {e.code}: {e.read()[:300]!r}") from None

    def tokenize(self, text: str) -> list[int]:
        """llama.cpp's ids for text, special tokens parsed (as chat prompts are), nothing added."""
        return self._post("/tokenize", {"content": text, "add_special": False, "parse_special": True})["tokens"]

    def render(self, messages: list[dict]) -> str:
        """The prompt llama-server's chat endpoint builds from messages with the file's chat template."""
        return self._post("/apply-template", {"messages": messages})["prompt"]

    def greedy(self, prompt_ids: list[int], max_tokens: int, ignore_eos: bool = False) -> Answer:
        """llama.cpp's greedy continuation of prompt ids (stopping at an end-of-generation token, which it includes,
        unless ignore_eos), with each token's raw log-prob."""
        r = self._post(
            "/completion",
            {
                "prompt": list(prompt_ids),
                "n_predict": max_tokens,
                "temperature": 0,
                "return_tokens": True,
                "cache_prompt": False,
                "n_probs": 1,
                "ignore_eos": ignore_eos,
            },
        )
        tokens = list(r["tokens"])
        # llama-server reports a log-prob per piece of text it streams, and a token that ends inside a UTF-8
        # character streams nothing: its entry is missing, so the entries are matched to the tokens by id
        probs = r.get("completion_probabilities") or []
        logprobs: list[float | None] = []
        j = 0
        for t in tokens:
            if j < len(probs) and probs[j]["id"] == t:
                logprobs.append(probs[j]["logprob"])
                j += 1
            else:
                logprobs.append(None)
        return Answer(tokens, logprobs, r.get("stop_type") or "", r.get("timings") or {})
