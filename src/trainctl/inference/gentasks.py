"""`trainctl data gen-tasks NAME tools=...`: tasks for an agent, generated from the tools' own listing by a generator
model, written as a data option that `trainctl train data=NAME tools=... reward=judge` trains on.

The tools are checked and listed as a launch lists them (trainctl.inference.tools.load_tools: every server started or
connected, each tool's schema); the generator is any OpenAI-compatible endpoint (its key read from an environment
variable, never written anywhere), or a local model (a model option, folder or run) that this command serves itself on
127.0.0.1 with trainctl's own OpenAI-compatible server for as long as it runs. Requests go out a few at a time, each
asking for a handful of tasks and shown the latest tasks kept (so that it writes new ones), until N distinct tasks
are kept or the request budget is spent. The tasks themselves (parsing, deduplication, the split, the rows) are
trainctl.data.gentasks.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainctl.data import gentasks
from trainctl.errors import TrainctlError, UsageError

REPORT_FILE = "gen-tasks.json"  # in the data folder: the report and the settings (never the key)


@dataclass
class Settings:
    n: int = 64  # distinct tasks wanted
    per_request: int = 8  # tasks asked for in one request
    max_requests: int | None = None  # default: 3 x the requests N needs
    concurrency: int = 4
    test_share: float = 0.1
    seed: int = 0
    temperature: float = 1.0
    max_tokens: int = 2048
    timeout_s: float = 120.0
    json_schema: bool = True  # ask for the answer's JSON schema (structured outputs / guided decoding)
    instruction: str | None = None  # appended to every task's prompt (e.g. how to give the final answer)

    def problems(self) -> list[str]:
        out = []
        if self.n < 1:
            out.append(f"-n {self.n}: at least one task")
        if self.per_request < 1:
            out.append(f"--per-request {self.per_request}: at least one task per request")
        if not 0 <= self.test_share < 1:
            out.append(f"--test-share {self.test_share:g}: a share in [0, 1)")
        if self.max_requests is not None and self.max_requests < 1:
            out.append(f"--max-requests {self.max_requests}: at least 1")
        return out


@dataclass
class Generator:
    url: str
    model: str
    api_key: str | None
    stop: Callable[[], None] = lambda: None  # ends a server this command started
    # trainctl's own server (a local generator) has no guided decoding and bounds max_tokens by the context left
    json_schema: bool = True
    max_tokens: int | None = None


@dataclass
class Written:
    report: gentasks.Report
    folder: Path
    option: Path  # the data option's YAML
    train_file: Path
    test_file: Path | None


def tool_schemas(words: list[str], search=None) -> tuple[Any, list[dict]]:
    """(the plan, the tool schemas the model would see) for the command's overrides: the servers checked, started
    or connected and listed as a launch does (a ConfigProblems when one cannot be), then stopped."""
    from trainctl.inference.tools import load_tools
    from trainctl.plan import resolve

    plan = resolve(["algorithm=grpo", *words], search)
    box = load_tools(plan)
    if box is None:
        raise UsageError(
            "gen-tasks writes tasks for a tool set: no tools are chosen.",
            hint="trainctl data gen-tasks my-tasks tools=calculator --generator ...   (or tools.servers_file=mcp.json)",
        )
    box.close()
    return plan, list(box.schemas)


def check_settings(s: Settings) -> None:
    found = s.problems()
    if found:
        raise UsageError(found[0] + ".", hint="trainctl data gen-tasks --help")


def endpoint(model: str | None, url: str | None, key_env: str | None) -> Generator | None:
    """The endpoint to ask, checked before anything starts: URL with MODEL (the name it serves), its key read from
    KEY_ENV; None when MODEL is a local model to serve here (start_local)."""
    import os

    api_key = None
    if key_env:
        api_key = os.environ.get(key_env)
        if not api_key:
            raise UsageError(
                f"--key-env {key_env}: the environment variable is not set.",
                hint=f"export {key_env}=...   (the key is read from it, never saved or logged)",
            )
    if not model:
        raise UsageError(
            "no generator: give --url and --generator (an OpenAI-compatible endpoint and the model it serves), or "
            "--generator MODEL alone to serve a local model here.",
            hint="--url https://api.openai.com/v1 --generator gpt-4.1-mini --key-env OPENAI_API_KEY",
        )
    return Generator(url.rstrip("/"), model, api_key) if url else None


def start_local(model: str, say: Callable[[str], None]) -> Generator:
    """MODEL (a model option, folder, run or checkpoint) served on 127.0.0.1 by trainctl's own OpenAI-compatible
    server, in a thread of this process, until the Generator's stop()."""
    from trainctl.inference.model import prepare
    from trainctl.inference.server import open_server

    server = open_server(prepare(model, [], command="data gen-tasks"), "127.0.0.1", 0, None, status=say)
    server.start()
    context = server.service.defaults.context_length or 4096
    # half the context for the answer: the prompt (the tool schemas and the tasks kept so far) takes the rest
    return Generator(server.url, server.served.name, None, server.stop, json_schema=False, max_tokens=context // 2)


def generate(
    gen: Generator,
    schemas: list[dict],
    s: Settings,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[gentasks.Task], gentasks.Report]:
    """Ask until s.n distinct tasks are kept or the request budget is spent. Malformed answers and failed requests
    are counted, never raised; only an endpoint that fails every request of the first round raises."""
    from trainctl.runtime.judge import JudgeClient

    names = [sc["function"]["name"] for sc in schemas]
    report = gentasks.Report(requested=s.n)
    budget = s.max_requests or max(1, 3 * -(-s.n // s.per_request))
    dedup = gentasks.Deduplicator()
    kept: list[gentasks.Task] = []
    start = time.monotonic()

    async def run() -> None:
        client = JudgeClient(
            gen.url,
            gen.model,
            gen.api_key,
            s.timeout_s,
            0,  # a failed request is counted and the next one asked: the client retrying it would hide it
            max_tokens=min(s.max_tokens, gen.max_tokens or s.max_tokens),
            temperature=s.temperature,
        )
        fmt = gentasks.response_format() if s.json_schema and gen.json_schema else None
        try:
            errors: list[str] = []
            while len(kept) < s.n and report.requests < budget:
                wave = min(s.concurrency, budget - report.requests, max(1, -(-(s.n - len(kept)) // s.per_request)))
                asks = [
                    _ask(client, gentasks.prompt(schemas, s.per_request, [t.task for t in kept]), fmt)
                    for _ in range(wave)
                ]
                report.requests += wave
                for text, error in await asyncio.gather(*asks):
                    if error is not None:
                        report.failed_requests += 1
                        errors.append(error)
                        continue
                    parsed = gentasks.parse(text, names)
                    report.malformed_answers += parsed.malformed_answers
                    report.malformed_tasks += parsed.malformed_tasks
                    for task in parsed.tasks:
                        if len(kept) < s.n and dedup.add(task):
                            kept.append(task)
                if progress is not None:
                    progress(len(kept), s.n)
                if report.failed_requests == report.requests:
                    raise TrainctlError(
                        f"the generator at {gen.url} failed every request ({report.requests}): {errors[-1]}.",
                        hint="check --url, --generator and --key-env: "
                        f"curl {gen.url}/models -H 'Authorization: Bearer $KEY'",
                    )
        finally:
            await client.client.close()

    asyncio.run(run())
    report.exact_duplicates, report.near_duplicates = dedup.exact, dedup.near
    report.kept = len(kept)
    report.seconds = round(time.monotonic() - start, 3)
    gentasks.describe(kept, names, report)
    return kept, report


async def _ask(client: Any, prompt: str, fmt: dict | None) -> tuple[str | None, str | None]:
    """(the answer's text, None) or (None, what failed)."""
    import openai

    async with client.limit:
        try:
            return await client.complete(prompt, client.max_tokens, fmt), None
        except openai.APITimeoutError:
            return None, "no answer in time"
        except openai.APIStatusError as e:
            return None, f"HTTP {e.status_code}"
        except (openai.OpenAIError, OSError, ValueError) as e:
            return None, type(e).__name__


def write(
    name: str,
    tasks: list[gentasks.Task],
    report: gentasks.Report,
    s: Settings,
    *,
    data_root: Path,
    conf_dir: Path,
    describe_command: str,
    tool_words: str,
) -> Written:
    """The rows (rl/train.parquet, rl/test.parquet), the report beside them, and the data option
    <conf_dir>/data/NAME.yaml that `data=NAME` finds; every file written to a temporary name and renamed."""
    from trainctl.data.writer import write_rows
    from trainctl.paths import atomic_write_text

    if not tasks:
        raise TrainctlError(
            f"the generator gave no usable task ({report.requests} requests: {report.malformed_answers} malformed "
            f"answers, {report.malformed_tasks} malformed tasks, {report.failed_requests} failed).",
            hint="try a stronger generator (--generator), or --no-json-schema if the endpoint rejects response_format",
        )
    train, test = gentasks.split(tasks, s.test_share, s.seed)
    report.train, report.test = len(train), len(test)
    folder = data_root / name
    files = {}
    for split_name, part in (("train", train), ("test", test)):
        if not part:
            continue
        path = folder / "rl" / f"{split_name}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        write_rows(tmp, (gentasks.row(t, i, split_name, s.instruction) for i, t in enumerate(part)))
        tmp.replace(path)
        files[split_name] = path
    settings = {k: v for k, v in s.__dict__.items()}
    atomic_write_text(
        folder / REPORT_FILE, json.dumps({"report": report.to_json(), "settings": settings}, indent=2) + "\n"
    )
    option = conf_dir / "data" / f"{name}.yaml"
    option.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(option, _option_yaml(name, folder, report, describe_command, tool_words, bool(test)))
    return Written(report, folder, option, files["train"], files.get("test"))


def _option_yaml(name: str, folder: Path, r: gentasks.Report, command: str, tools: str, has_test: bool) -> str:
    train = f"trainctl train algorithm=grpo data={name} {tools or 'tools=...'}"
    return f"""# {name}: {r.kept} tasks generated from the tools' listing by `trainctl data gen-tasks` ({r.train} train,
# {r.test} test; {r.with_answer} with a known answer). Made with:
#   {command}
# Train on them with an LLM judge (RULER-style: it ranks each prompt's trajectories, no ground truth needed):
#   {train} reward=judge reward.judge=... reward.url=...
defaults:
  - _base
  - _self_

name: {name}
# written by gen-tasks; `trainctl data prep` has nothing to fetch for it
dir: {folder}
formats: [rl]
{"" if has_test else "# no test split: every task went to train" + chr(10) + "val_files: null" + chr(10)}\
# no verl scorer reads this data_source: score with reward=judge (or reward=fn)
data_source: {gentasks.DATA_SOURCE}
ability: {gentasks.ABILITY}
instruction: null
# a task and the tool schemas rendered into the prompt
max_prompt_length: 1024
# several tool calls, their results and the final answer
max_response_length: 512
"""
