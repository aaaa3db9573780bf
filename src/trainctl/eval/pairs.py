"""`trainctl eval` of a reward model: held-out pair accuracy on the data's test pairs.

A reward model (a run trained with algorithm=rm, one of its checkpoints, or a one-label classifier: a model option of
kind reward, a folder) generates nothing: it scores. Each test pair's prompt with its chosen answer and with its
rejected one go through the tokenizer's chat template, as TRL's RewardTrainer reads them; the pair counts as right
when the chosen answer scores higher. Written per checkpoint to <run>/eval/metrics.jsonl as eval/<data>/pair_accuracy
and eval/<data>/pair_margin (the mean chosen-minus-rejected score), where `runs show`, `ckpt ls -m` and `ckpt best`
read them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainctl.errors import ConfigProblems, Problem
from trainctl.eval.targets import Resolved, Target, merged_folder
from trainctl.eval.targets import resolve as resolve_model
from trainctl.paths import atomic_write_text

ACCURACY, MARGIN = "pair_accuracy", "pair_margin"
# pairs scored in one forward pass (two sequences each)
BATCH = 16


@dataclass
class PreparedPairs:
    resolved: Resolved
    data_name: str
    val_file: Path
    rows: list[dict]
    out_dir: Path
    seed: int
    max_length: int | None
    notes: list[str] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)

    @property
    def targets(self) -> list[Target]:
        return self.resolved.targets

    @property
    def prefix(self) -> str:
        return f"eval/{self.data_name}"


@dataclass
class PairResult:
    target: Target
    metrics: dict[str, float]
    samples_file: Path
    seconds: float
    pairs: int
    best: bool = False


def is_reward_model(model: str, search) -> bool:
    """Whether MODEL is a reward model: a run (or its checkpoint) trained with algorithm=rm, a model option of kind
    reward, or a folder holding a sequence classifier."""
    from trainctl.config.load import load_option

    path = Path(model).expanduser()
    if path.exists():
        for parent in [path, *path.parents][:3]:
            try:
                return json.loads((parent / "run.json").read_text()).get("family") == "rm"
            except (OSError, ValueError, AttributeError):
                continue
        try:
            config = json.loads((path / "config.json").read_text())
        except (OSError, ValueError):
            return False
        return any(str(a).endswith("ForSequenceClassification") for a in config.get("architectures") or [])
    option = load_option("model", model, search) if model in search.options("model") else None
    return option is not None and option.kind == "reward"


def prepare(
    model: str,
    words: list[str],
    *,
    each_checkpoint: bool = False,
    out: Path | None = None,
    limit: int | None = None,
    base: bool = True,
    search=None,
) -> PreparedPairs:
    """Resolve the reward model and the test pairs it is scored on, before any model is loaded."""
    from trainctl.config.search import SearchPath
    from trainctl.eval.core import _slug
    from trainctl.eval.settings import split_words
    from trainctl.plan import resolve

    search = search or SearchPath.default()
    given, overrides = split_words(words)
    problems: list[Problem] = [
        Problem(
            f"{key}={value}: a reward model generates nothing; eval scores each test pair once.",
            key=key,
            hint=f"drop {key}=...",
        )
        for key, value in given.items()
    ]
    resolved = resolve_model(model, each_checkpoint, search.options("model"))
    # the run's data in its pair form (a reward model trains on pairs: data_format dpo)
    plan = resolve(["algorithm=rm", *resolved.args, *overrides], search)
    cfg = plan.cfg
    model_dir = Path(cfg.model.path).expanduser()
    if resolved.kind == "name":
        if not (model_dir / "config.json").is_file():
            problems.append(
                Problem(
                    f"model={model} is not here: {model_dir} has no config.json.",
                    key="model",
                    hint=f"trainctl model init {model}" if model.startswith("tiny") else f"trainctl model pull {model}",
                )
            )
        resolved.targets[0].folder = model_dir
    elif resolved.kind == "run" and each_checkpoint and base and (model_dir / "config.json").is_file():
        # the model the run started from, with the head it started with (the same seed: see score())
        resolved.targets.insert(0, Target("base", 0, None, model_dir))
    val = cfg.data.val_files
    val_file = Path(val).expanduser() if val else Path()
    if not val or not val_file.is_file():
        problems.append(
            Problem(
                f"data={cfg.data.name} has no test pairs at {val or '(data.val_files is not set)'}.",
                key="data.val_files",
                hint=f"trainctl data prep {cfg.data.name}   (or point at a file of pairs: data.val_files=PATH)",
            )
        )
    else:
        from trainctl.data.check import quick_check

        problems += [p for p in quick_check(val_file, "dpo", custom_reward=True) if p.is_error]
    if limit is not None and limit < 1:
        problems.append(Problem(f"--limit {limit}: at least one pair.", key="--limit", hint="--limit 16"))
    errors = [p for p in problems if p.is_error]
    if errors:
        raise ConfigProblems(errors)
    out_dir = (
        Path(out).expanduser()
        if out
        else (resolved.run_dir / "eval" if resolved.run_dir else Path("eval") / _slug(resolved.name))
    ).resolve()
    import pyarrow.parquet as pq

    table = pq.read_table(val_file, columns=["prompt", "chosen", "rejected"])
    rows = (table.slice(0, limit) if limit else table).to_pylist()
    max_length = plan.value("max_length")
    notes = ["a reward model: each test pair's chosen and rejected answers scored once (no generation)"]
    return PreparedPairs(
        resolved,
        cfg.data.name,
        val_file,
        rows,
        out_dir,
        cfg.run.seed,
        max_length if isinstance(max_length, int) else None,
        notes,
        plan.warnings,
    )


def _messages(value: Any, role: str) -> list[dict]:
    return [{"role": role, "content": value}] if isinstance(value, str) else [dict(m) for m in value]


def score(
    folder: Path, texts: list[list[dict]], seed: int, max_length: int | None, progress: Callable | None = None
) -> list[float]:
    """The reward model's score of each conversation (its one logit at the last token that is not padding)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, set_seed

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    # a causal LM (a run's base) gets a new head, drawn as trainctl's TRL entry point draws it with the run's seed
    from trainctl.silence import quiet

    set_seed(seed)
    with quiet():  # transformers reports the new head of a causal LM as missing weights
        model = AutoModelForSequenceClassification.from_pretrained(str(folder), num_labels=1)
    model.config.pad_token_id = tokenizer.pad_token_id
    model.eval()
    scores: list[float] = []
    for start in range(0, len(texts), BATCH):
        chunk = [tokenizer.apply_chat_template(t, tokenize=False) for t in texts[start : start + BATCH]]
        batch = tokenizer(
            chunk, padding=True, truncation=max_length is not None, max_length=max_length, return_tensors="pt",
            add_special_tokens=False,
        )  # fmt: skip
        with torch.no_grad():
            scores += model(**batch).logits[:, 0].float().tolist()
        if progress:
            progress(len(scores), len(texts))
    return scores


def evaluate(p: PreparedPairs, target: Target, progress: Callable | None = None) -> PairResult:
    """Score one target's pairs; write its per-pair scores and its metrics."""
    from trainctl.eval.core import _slug, write_metrics

    start = time.monotonic()
    folder = merged_folder(target)
    texts = []
    for row in p.rows:
        prompt = _messages(row["prompt"], "user")
        texts += [prompt + _messages(row["chosen"], "assistant"), prompt + _messages(row["rejected"], "assistant")]
    scores = score(folder, texts, p.seed, p.max_length, progress)
    records = [
        {"row": i, "chosen": scores[2 * i], "rejected": scores[2 * i + 1], "right": scores[2 * i] > scores[2 * i + 1]}
        for i in range(len(p.rows))
    ]
    n = len(records) or 1
    metrics = {
        f"{p.prefix}/{ACCURACY}": sum(r["right"] for r in records) / n,
        f"{p.prefix}/{MARGIN}": sum(r["chosen"] - r["rejected"] for r in records) / n,
    }
    samples_file = p.out_dir / "samples" / p.data_name / f"{_slug(target.label.replace(' ', '-'))}.pairs.jsonl"
    atomic_write_text(samples_file, "".join(json.dumps(r) + "\n" for r in records))
    if target.step is not None:
        write_metrics(p.out_dir, target.step, metrics)
    return PairResult(target, metrics, samples_file, time.monotonic() - start, len(records))


def mark_best(results: list[PairResult], metric: str) -> None:
    """The checkpoint with the highest pair accuracy, the earliest among equals (as `ckpt best` picks)."""
    scored = [r for r in results if r.target.checkpoint is not None and metric in r.metrics]
    if len(scored) >= 2:
        max(scored, key=lambda r: r.metrics[metric]).best = True
