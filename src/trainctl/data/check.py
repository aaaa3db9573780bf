"""Checking a data file against the config that will train on it, before a GPU is spent on it.

full_check (`trainctl data check`) reads every row: schema, reward coverage, ground truths, token lengths against
the configured maximum (with the model's tokenizer when it is on disk), duplicates.
quick_check (run by `trainctl train` itself) reads only the parquet footer and a column or two.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from trainctl.data.readers import read_rows
from trainctl.data.shapes import ROLES
from trainctl.errors import Problem
from trainctl.facts import verl as verl_facts

REQUIRED = {
    "rl": ("data_source", "prompt", "reward_model"),
    "sft": ("messages",),
    "dpo": ("prompt", "chosen", "rejected"),
    "kto": ("prompt", "completion", "label"),
}
FORMAT_OF = {frozenset(cols): fmt for fmt, cols in REQUIRED.items()}
DEFAULT_ALGORITHM = {"rl": "grpo", "sft": "sft", "dpo": "dpo", "kto": "kto"}


def detect_format(columns: set[str]) -> str | None:
    for fmt in ("rl", "dpo", "kto", "sft"):
        if set(REQUIRED[fmt]) <= columns:
            return fmt
    return None


def scored(source: str) -> bool:
    return source in verl_facts.SCORED_DATA_SOURCES or source.startswith(verl_facts.SCORED_DATA_SOURCE_PREFIXES)


def _convert_hint(path: Path, fmt: str) -> str:
    return f"convert it: trainctl data convert {path} --to {fmt} --out {path.with_suffix('')}.{fmt}.parquet"


def missing_columns(path: Path, columns: set[str], fmt: str) -> list[Problem]:
    missing = [c for c in REQUIRED[fmt] if c not in columns]
    if not missing:
        return []
    return [
        Problem(
            f"{path} lacks the column{'s' if len(missing) > 1 else ''} {', '.join(missing)} that {fmt} training "
            f"reads (it has: {', '.join(sorted(columns)) or 'none'}).",
            key="data.train_files",
            hint=_convert_hint(path, fmt),
        )
    ]


def coverage_problems(sources: Counter, custom_reward: bool, path: Path) -> list[Problem]:
    if custom_reward:
        return []
    unscored = {s: n for s, n in sources.items() if not scored(str(s))}
    if not unscored:
        return []
    listed = ", ".join(f"{s!r} ({n} rows)" for s, n in sorted(unscored.items(), key=lambda kv: -kv[1])[:5])
    return [
        Problem(
            f"{path}: no reward function for data_source {listed}: verl would fail with "
            '"Reward function is not implemented" once rollouts start.',
            key="reward",
            hint="name your scorer: reward=fn reward.fn=path/to/reward.py:compute_score, or write a data_source verl "
            "scores (e.g. trainctl data convert ... --data-source openai/gsm8k)",
        )
    ]


# -- the quick check, columnar ----------------------------------------------------------------------------------


def quick_check(path: Path, fmt: str, custom_reward: bool, ground_truth: bool = True) -> list[Problem]:
    """Schema, reward coverage and empty ground truths (unless the reward needs none) from a parquet file's footer
    and two columns.

    Kept in trainctl's cache per version of the file (and of this check's code, and pyarrow's): every plan runs it,
    and importing pyarrow costs ~0.1 s of the 0.3 s a config error is allowed.
    """
    import dataclasses
    import importlib.util

    from trainctl import paths

    path = Path(path).expanduser()
    code = [Path(__file__), Path(verl_facts.__file__), Path(importlib.util.find_spec("pyarrow").origin)]
    found = paths.memo_on_files(
        "data-check",
        [path, *code],
        (str(path), fmt, custom_reward, ground_truth),
        lambda: [dataclasses.asdict(p) for p in _quick_check(path, fmt, custom_reward, ground_truth)],
    )
    return [Problem(**p) for p in found]


def _quick_check(path: Path, fmt: str, custom_reward: bool, ground_truth: bool) -> list[Problem]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path).expanduser()
    try:
        schema = pq.read_schema(path)
    except Exception as e:
        return [Problem(f"{path} is not a readable parquet file ({e}).", key="data.train_files")]
    problems = missing_columns(path, set(schema.names), fmt)
    if problems or fmt != "rl":
        return problems
    # ParquetFile reads the columns without pyarrow.dataset, which read_table imports
    parquet = pq.ParquetFile(path)
    table = parquet.read(columns=["data_source", "reward_model"])
    problems += coverage_problems(_value_counts(table["data_source"]), custom_reward, path)
    if not ground_truth:
        return problems
    try:
        n_empty = _empty_ground_truths(table["reward_model"])
    except (AttributeError, KeyError, TypeError, ValueError, pa.ArrowException):
        missing = Problem(
            f"{path}: reward_model has no ground_truth field.", key="data.train_files", hint=_convert_hint(path, "rl")
        )
        return [*problems, missing]
    if n_empty:
        problems.append(
            Problem(
                f"{path}: {n_empty} of {table.num_rows} rows have an empty reward_model.ground_truth.",
                key="data.train_files",
                hint="drop or fix them (trainctl data check shows where)",
            )
        )
    return problems


# pyarrow.compute imports pandas on its first call (0.3 s, a third of a typo's time to its error): columns of up to
# this many rows are counted in Python instead, which takes less than that
_SMALL = 100_000


def _value_counts(column) -> Counter:
    if len(column) <= _SMALL:
        return Counter(column.to_pylist())
    import pyarrow.compute as pc

    return Counter({c["values"]: c["counts"] for c in pc.value_counts(column).to_pylist()})


def _empty_ground_truths(reward_model) -> int:
    """Rows whose reward_model.ground_truth is null or empty (KeyError when there is no such field)."""
    truths = reward_model.combine_chunks().field("ground_truth")
    if len(truths) <= _SMALL:
        return sum(1 for t in truths.to_pylist() if t is None or str(t) == "")
    import pyarrow.compute as pc

    empty = pc.sum(pc.or_kleene(pc.is_null(truths), pc.equal(pc.utf8_length(pc.cast(truths, "string")), 0)))
    return int(empty.as_py() or 0)


# -- the full check, row by row ---------------------------------------------------------------------------------


@dataclass
class Report:
    path: Path
    fmt: str
    rows: int = 0
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    sources: Counter = field(default_factory=Counter)
    bad_rows: Counter = field(default_factory=Counter)  # reason -> rows
    bad_examples: dict[str, list[str]] = field(default_factory=dict)
    duplicates: int = 0
    lengths: list[int] = field(default_factory=list)
    limit: int | None = None
    limit_key: str = ""
    tokenizer: str | None = None  # where the tokenizer came from; None: estimated from characters

    @property
    def over(self) -> int:
        return sum(1 for n in self.lengths if self.limit and n > self.limit)

    def histogram(self) -> list[tuple[str, int]]:
        if not self.limit or not self.lengths:
            return []
        edges = [0.25, 0.5, 0.75, 1.0]
        labels = [f"<= {int(e * self.limit)}" for e in edges] + [f"> {self.limit}"]
        counts = [0] * 5
        for n in self.lengths:
            i = next((k for k, e in enumerate(edges) if n <= e * self.limit), 4)
            counts[i] += 1
        return list(zip(labels, counts, strict=True))

    def bad(self, reason: str, where: str) -> None:
        self.bad_rows[reason] += 1
        self.bad_examples.setdefault(reason, [])
        if len(self.bad_examples[reason]) < 3:
            self.bad_examples[reason].append(where)


def _msgs_ok(value) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str) for m in value)
    )


def _row_problems(fmt: str, row: dict) -> list[str]:
    if fmt == "rl":
        out = []
        if not isinstance(row.get("data_source"), str) or not row["data_source"]:
            out.append("empty data_source")
        prompt = row.get("prompt")
        if not _msgs_ok(prompt) or not any(m["role"] == "user" for m in prompt):
            out.append("prompt is not a list of chat messages with a user turn")
        rm = row.get("reward_model")
        truth = rm.get("ground_truth") if isinstance(rm, dict) else None
        if truth is None or (isinstance(truth, str) and not truth.strip()):
            out.append("empty reward_model.ground_truth")
        return out
    if fmt == "sft":
        msgs = row.get("messages")
        if not _msgs_ok(msgs):
            return ["messages is not a list of {role, content} chat messages"]
        if not any(m["role"] == "assistant" for m in msgs):
            return ["no assistant message to learn"]
        return []
    if fmt == "kto":
        out = []
        for key in ("prompt", "completion"):
            v = row.get(key)
            if not (isinstance(v, str) and v.strip()) and not _msgs_ok(v):
                out.append(f"empty or malformed {key}")
        if not isinstance(row.get("label"), bool):
            out.append("label is not true or false")
        return out
    out = []
    for key in ("prompt", "chosen", "rejected"):
        v = row.get(key)
        if not (isinstance(v, str) and v.strip()) and not _msgs_ok(v):
            out.append(f"empty or malformed {key}")
    if not out and row["chosen"] == row["rejected"]:
        out.append("chosen and rejected are the same")
    return out


def _length_texts(fmt: str, row: dict) -> list | str:
    """What counts against the limit: RL the prompt, SFT the whole conversation, DPO the prompt and longer answer,
    KTO the prompt and its answer."""
    if fmt == "rl":
        return row.get("prompt") or []
    if fmt == "sft":
        return row.get("messages") or []

    def as_msgs(v, role):
        return [{"role": role, "content": v}] if isinstance(v, str) else list(v or [])

    if fmt == "kto":
        return as_msgs(row.get("prompt"), "user") + as_msgs(row.get("completion"), "assistant")

    longer = max((row.get("chosen"), row.get("rejected")), key=lambda v: len(json.dumps(v, default=str)))
    return as_msgs(row.get("prompt"), "user") + as_msgs(longer, "assistant")


class _Counter:
    """Token counts: the model's tokenizer and chat template when they are on disk, else ~3.5 characters a token."""

    def __init__(self, model_path: str | None):
        self.tok = None
        self.source = None
        if model_path and (Path(model_path).expanduser() / "tokenizer_config.json").is_file():
            from transformers import AutoTokenizer

            self.tok = AutoTokenizer.from_pretrained(Path(model_path).expanduser())
            self.source = str(model_path)

    def count(self, msgs, add_generation_prompt: bool) -> int:
        if self.tok is not None and getattr(self.tok, "chat_template", None):
            ids = self.tok.apply_chat_template(
                msgs, add_generation_prompt=add_generation_prompt, tokenize=True, return_dict=False
            )
            return len(ids["input_ids"] if hasattr(ids, "keys") else ids)
        text = "".join(m.get("content", "") for m in msgs)
        if self.tok is not None:
            return len(self.tok(text)["input_ids"])
        return math.ceil(len(text) / 3.5) + 4 * len(msgs)


def full_check(
    path: Path,
    fmt: str,
    limit: int | None,
    limit_key: str,
    model_path: str | None,
    custom_reward: bool,
    truncation_fails: bool,
    progress: Callable[[int], None] | None = None,
) -> Report:
    from trainctl.data.readers import columns

    path = Path(path).expanduser()
    report = Report(path=path, fmt=fmt, limit=limit, limit_key=limit_key)
    cols = columns(path)
    report.problems += missing_columns(path, cols, fmt)
    if report.problems:
        return report
    if path.suffix.lower() != ".parquet":
        report.problems.append(
            Problem(f"{path}: trainers read parquet files.", key="data.train_files", hint=_convert_hint(path, fmt))
        )
    counter = _Counter(model_path)
    report.tokenizer = counter.source
    seen: set[bytes] = set()
    for row in read_rows(path):
        report.rows += 1
        if progress:
            progress(1)
        for reason in _row_problems(fmt, row.data):
            report.bad(reason, row.where)
        if fmt == "rl" and isinstance(row.data.get("data_source"), str):
            report.sources[row.data["data_source"]] += 1
        key = "prompt" if fmt == "rl" else None
        digest = hashlib.blake2b(
            json.dumps(row.data.get(key) if key else row.data, sort_keys=True, default=str).encode(), digest_size=12
        ).digest()
        if digest in seen:
            report.duplicates += 1
        seen.add(digest)
        texts = _length_texts(fmt, row.data)
        if isinstance(texts, list) and texts and all(isinstance(m, dict) for m in texts):
            try:
                report.lengths.append(counter.count(texts, add_generation_prompt=fmt == "rl"))
            except Exception as e:  # the chat template rejects the row: training would too
                report.bad(f"the model's chat template cannot render it ({type(e).__name__})", row.where)
    if report.rows == 0:
        report.problems.append(Problem(f"{path} has no rows.", key="data.train_files"))
    for reason, n in report.bad_rows.most_common():
        report.problems.append(
            Problem(
                f"{n} row{'s' if n > 1 else ''}: {reason} (e.g. {', '.join(report.bad_examples[reason])}).",
                key="data.train_files",
            )
        )
    if fmt == "rl":
        report.problems += coverage_problems(report.sources, custom_reward, path)
    if report.over:
        over = Problem(
            f"{report.over} of {len(report.lengths)} rows are longer than {limit_key} = {limit} tokens"
            + ("" if report.tokenizer else " (estimated: no tokenizer on disk)")
            + ".",
            key=limit_key,
            hint=f"raise {limit_key}, or drop the long rows",
            severity="error" if truncation_fails else "warning",
        )
        (report.problems if truncation_fails else report.warnings).append(over)
    if report.duplicates:
        what = "an earlier row's prompt" if fmt == "rl" else "an earlier row"
        report.warnings.append(Problem(f"{report.duplicates} rows repeat {what}."))
    return report


def check_args(path: Path, overrides: list[str], search) -> list[str]:
    """The overrides of the config a file is checked against: the user's, with the algorithm its columns are for and
    the data option a prepared file belongs to (<data dir>/<name>/<format>/<split>.parquet) when not given."""
    from trainctl.data.readers import DataError, columns

    args = list(overrides)
    cols = columns(path)
    fmt = detect_format(cols)
    if not any(a.split("=")[0] in ("algorithm", "recipe") for a in args):
        if fmt is None:
            raise DataError(
                f"cannot tell which trainer {path} is for (columns: {', '.join(sorted(cols)) or 'none'}).",
                hint="name the algorithm: trainctl data check FILE algorithm=grpo (or sft, dpo, kto)",
            )
        args.insert(0, f"algorithm={DEFAULT_ALGORITHM[fmt]}")
    if not any(a.split("=")[0] == "data" for a in args):
        name = path.parent.parent.name
        if name in search.options("data"):
            args.insert(0, f"data={name}")
    return args
