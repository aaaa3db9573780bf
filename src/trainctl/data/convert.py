"""Converting examples into the format a trainer reads, streaming, with a summary of what was written and dropped.

rl   verl's RLHFDataset: data_source, prompt (messages), ability, reward_model {style, ground_truth},
     extra_info {split, index, ...}
sft  verl 0.9.1's MultiTurnSFTDataset: messages
dpo  TRL's DPOTrainer (and its reward, ORPO and CPO trainers), conversational: prompt (messages), chosen and
     rejected (assistant messages)
kto  TRL's KTOTrainer, unpaired and conversational: prompt (messages), completion (assistant messages), label (true:
     desirable); a preference pair becomes two rows
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from trainctl.data.readers import DataError, Row, read_rows
from trainctl.data.shapes import Example, Shape, Skip, detect, example, ground_truth
from trainctl.data.writer import ParquetWriter
from trainctl.facts import verl as verl_facts

FORMATS = ("rl", "sft", "dpo", "kto")
# rows between progress bar updates (a redraw per row would cost more than the row)
PROGRESS_EVERY = 1000


@dataclass
class Summary:
    written: dict[str, int] = field(default_factory=dict)  # path -> rows
    dropped: Counter = field(default_factory=Counter)  # reason -> rows
    examples: dict[str, list[str]] = field(default_factory=dict)  # reason -> a few locations
    shape: Shape | None = None

    def drop(self, reason: str, row: Row | str) -> None:
        self.dropped[reason] += 1
        examples = self.examples.setdefault(reason, [])
        if len(examples) < 3:
            examples.append(row if isinstance(row, str) else row.where)

    def lines(self) -> list[str]:
        out = [f"wrote {n} rows to {path}" for path, n in self.written.items()]
        for reason, n in self.dropped.most_common():
            out.append(f"dropped {n} rows: {reason} (e.g. {', '.join(self.examples[reason])})")
        return out


@dataclass
class Target:
    """How examples become rows of one format."""

    fmt: str
    data_source: str | None = None
    ability: str = "math"
    instruction: str | None = None
    split: str = "train"
    # kto: a pair's undesirable row, written after the next example's desirable one (see rows())
    _held: dict | None = field(default=None, repr=False, compare=False)

    def rows(self, ex: Example, index: int, extra: dict | None = None) -> list[dict]:
        """The rows an example becomes: one, or for kto one per labelled answer.

        KTO's rows: the chosen answer desirable, the rejected one not. TRL's KTOTrainer reads rows in order and
        estimates its KL term by pairing each row's prompt with its neighbour's answer in the micro-batch, so a
        pair's undesirable row is held back one example: no two neighbouring rows share a prompt, and desirable and
        undesirable rows still alternate."""
        if self.fmt != "kto":
            return [self.row(ex, index, extra)]
        if ex.chosen is None and ex.rejected is None:
            raise Skip("no labelled answer (KTO needs a prompt and a desirable or an undesirable answer)")
        out = [{"prompt": ex.prompt, "completion": ex.chosen, "label": True}] if ex.chosen is not None else []
        if self._held is not None:
            out.append(self._held)
            self._held = None
        if ex.rejected is not None:
            row = {"prompt": ex.prompt, "completion": ex.rejected, "label": False}
            if ex.chosen is not None:
                self._held = row
            else:
                out.append(row)
        return out

    def rest(self) -> list[dict]:
        """What rows() still holds back, once the examples have ended."""
        held, self._held = self._held, None
        return [held] if held is not None else []

    def row(self, ex: Example, index: int, extra: dict | None = None) -> dict:
        if self.fmt == "sft":
            if ex.response:
                return {"messages": [*ex.prompt, {"role": "assistant", "content": ex.response}]}
            if ex.chosen is not None:  # preference pairs train SFT on the chosen answer
                return {"messages": [*ex.prompt, *ex.chosen]}
            raise Skip("no response to learn")
        if self.fmt == "dpo":
            if ex.chosen is None or ex.rejected is None:
                raise Skip("no rejected response (DPO needs prompt, chosen and rejected)")
            return {"prompt": ex.prompt, "chosen": ex.chosen, "rejected": ex.rejected}
        # rl
        if not ex.response:
            raise Skip(
                "a preference pair has no ground truth to reward"
                if ex.chosen
                else "no answer to take the ground truth from"
            )
        truth = ground_truth(ex.response)
        if not truth:
            raise Skip("no ground truth in the answer")
        prompt = ex.prompt
        if prompt[-1]["role"] != "user" and not any(m["role"] == "user" for m in prompt):
            raise Skip("no user message in the prompt")
        if self.instruction:  # on a copy: the other formats share the example
            last = prompt[-1]
            prompt = [*prompt[:-1], {"role": last["role"], "content": f"{last['content']} {self.instruction}"}]
        info = {"split": self.split, "index": index}
        if extra:
            info.update(extra)
        return {
            "data_source": self.data_source,
            "prompt": prompt,
            "ability": self.ability,
            "reward_model": {"style": "rule", "ground_truth": truth},
            "extra_info": info,
        }


def write_formats(
    items: Iterable[tuple[Example | None, str, dict | None]],
    targets: dict[str, tuple[Target, Path]],
    summary: Summary,
    limit: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[str, int]:
    """Write (example, location, extra_info) items as rows of each target format; returns rows written per format.

    A location is the source Row (its file:line is formatted only for the few dropped rows a summary shows) or text.

    An item whose example is None was dropped upstream (its reason is extra["skip"]). Files appear only when every
    format was written whole; on any failure nothing is left behind.
    """
    writers = {fmt: ParquetWriter(out) for fmt, (_, out) in targets.items()}
    counts = dict.fromkeys(targets, 0)
    several = len(targets) > 1
    try:
        seen = 0
        for n, (ex, where, extra) in enumerate(items, 1):
            if progress and n % PROGRESS_EVERY == 0:
                progress(PROGRESS_EVERY)
            if ex is None:
                summary.drop((extra or {}).get("skip", "unreadable"), where)
                continue
            for fmt, (target, _) in targets.items():
                try:
                    for row in target.rows(ex, counts[fmt], extra):
                        writers[fmt].write(row)
                        counts[fmt] += 1
                except Skip as s:
                    summary.drop(f"{fmt}: {s}" if several else str(s), where)
            seen += 1
            if limit and seen >= limit:
                break
        for fmt, (target, _) in targets.items():
            for row in target.rest():
                writers[fmt].write(row)
                counts[fmt] += 1
        for fmt, (_, out) in targets.items():
            if counts[fmt] == 0:
                reasons = (
                    "; ".join(f"{k} ({v} rows)" for k, v in summary.dropped.most_common(3)) or "the input is empty"
                )
                raise DataError(
                    f"no rows to write to {out}: {reasons}.", hint="check the input and the format asked for"
                )
        for w in writers.values():
            w.close()
    except BaseException:
        for w in writers.values():
            w.abort()
        raise
    for fmt, (_, out) in targets.items():
        summary.written[str(out)] = counts[fmt]
    return counts


# source columns that travel to RL rows' extra_info, as verl's example preprocessing keeps them
EXTRA_FIELDS = ("question", "answer", "level", "type")
_SCALARS = (str, int, float)


def examples_from(
    rows: Iterator[Row], shape: Shape | None = None, columns: dict | None = None, parser: Callable | None = None
) -> Iterator[tuple[Example | None, str, dict | None]]:
    """(example, location, extra_info) for each row: by a parser, a known shape, or a shape detected from the
    first row's columns (with the mapping `columns`)."""
    for row in rows:
        data = row.data
        try:
            if parser:
                ex = parser(data)
            else:
                shape = shape or detect(set(data), columns)
                ex = example(shape, data)
        except Skip as s:
            yield None, row, {"skip": str(s)}
            continue
        extra = {k: data[k] for k in EXTRA_FIELDS if k in data and isinstance(data[k], _SCALARS)}
        yield ex, row, extra


def default_data_source(path: Path, shape: Shape, sample: int = 200) -> str | None:
    """openai/gsm8k when the answers end in `#### <answer>` (verl's gsm8k scorer reads exactly that)."""
    hits = total = 0
    for row in read_rows(path):
        try:
            ex = example(shape, row.data)
        except Skip:
            continue
        total += 1
        hits += bool(ex.response and "####" in ex.response)
        if total >= sample:
            break
    return "openai/gsm8k" if total and hits == total else None


def convert(
    source: Path,
    to: str,
    out: Path,
    data_source: str | None = None,
    mapping: dict[str, str | None] | None = None,
    instruction: str | None = None,
    ability: str | None = None,
    split: str = "train",
    limit: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> Summary:
    """A user's JSONL/JSON/CSV/parquet file as one trainer format, written atomically to `out`."""
    from trainctl.data.readers import columns

    if to not in FORMATS:
        raise DataError(f"--to {to}: choose one of {', '.join(FORMATS)}.")
    source, out = Path(source).expanduser(), Path(out).expanduser()
    shape = detect(columns(source), mapping)
    summary = Summary(shape=shape)
    if to == "rl":
        data_source = data_source or default_data_source(source, shape)
        if not data_source:
            known = ", ".join(verl_facts.SCORED_DATA_SOURCES[:4])
            raise DataError(
                "RL rows need a data_source: verl picks the reward function by it.",
                hint=f"--data-source openai/gsm8k (or another verl scores: {known}, ...), or your own name "
                "with your own scorer: reward=fn reward.fn=path/to/reward.py:compute_score",
            )
    target = Target(fmt=to, data_source=data_source, ability=ability or "math", instruction=instruction, split=split)
    write_formats(examples_from(read_rows(source), shape), {to: (target, out)}, summary, limit, progress)
    return summary
