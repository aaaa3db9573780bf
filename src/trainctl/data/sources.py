"""Where `trainctl data prep` reads a dataset: the Hugging Face hub, ModelScope, or a local copy (--from).

Every source yields Rows; a data option's `source.columns` (or `source.parser`) says how its rows become examples.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from trainctl.data.readers import SUFFIXES, DataError, Row, read_rows
from trainctl.data.shapes import Example, Skip

# a split held out of a source that has none: every HOLDOUT-th row
HOLDOUT = 50


def split_files(folder: Path, split: str, source_split: str | None = None) -> list[Path]:
    """Files of a split in a local copy: their name (or folder) names it.

    The source's own split name wins (train_prefs beside train_sft); else train, or test/validation/dev for test.
    """
    files = [f for f in sorted(folder.rglob("*")) if f.is_file() and f.suffix.lower() in SUFFIXES]
    if source_split and source_split != split:
        exact = [f for f in files if source_split.lower() in str(f.relative_to(folder)).lower()]
        if exact:
            return exact
    aliases = {"test": ("test", "validation", "valid", "val", "dev"), "train": ("train",)}.get(split, (split,))
    found = []
    for f in files:
        parts = re.split(r"[/\\._-]+", str(f.relative_to(folder)).lower())
        if any(a in parts for a in aliases):
            found.append(f)
    return found


def local_rows(path: Path, split: str, source_split: str | None = None) -> Iterator[Row] | None:
    """A split of a local copy; None when it has no such split."""
    path = Path(path).expanduser()
    if not path.exists():
        raise DataError(f"--from {path}: no such file or folder.")
    if path.is_file():
        return read_rows(path) if split == "train" else None
    files = split_files(path, split, source_split)
    if not files:
        if split == "train":
            raise DataError(
                f"--from {path}: no train file in it (looked for files named train*.jsonl/.json/.csv/.parquet).",
                hint="pass the file itself: --from path/to/train.jsonl",
            )
        return None

    def chain() -> Iterator[Row]:
        for f in files:
            yield from read_rows(f)

    return chain()


def _hub_error(e: Exception, repo: str, where: str) -> DataError:
    text = f"{type(e).__name__}: {e}"
    if "Gated" in text or "401" in text or "403" in text:
        return DataError(
            f"{repo} on {where} needs a token (it is gated or private).",
            hint="accept its terms on the hub, then set HF_TOKEN (or run `huggingface-cli login`)",
        )
    if "NotFound" in text or "404" in text or "doesn't exist" in text:
        return DataError(f"{repo} was not found on {where}.", hint="check the name in conf/data/, or pass --from PATH")
    return DataError(
        f"cannot read {repo} from {where}: {str(e).splitlines()[0][:200] if str(e) else type(e).__name__}",
        hint="download it where the hub is reachable and pass --from PATH, set HF_ENDPOINT to a mirror, "
        "or try --source modelscope",
    )


def reachable(url: str, timeout: float = 3.0) -> bool:
    """Whether a hub endpoint accepts connections (a TCP connect, so that an offline machine fails fast)."""
    import socket
    from urllib.parse import urlparse

    parsed = urlparse(url if "://" in url else f"https://{url}")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((parsed.hostname or "", port), timeout=timeout):
            return True
    except OSError:
        return False


def hub_rows(repo: str, config: str | None, split: str, limit: int | None) -> Iterator[Row]:
    import os

    from datasets import load_dataset

    where = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "") or not reachable(where):
        raise DataError(
            f"cannot reach the Hugging Face hub at {where} to read {repo}"
            + (" (HF_HUB_OFFLINE is set)." if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "") else "."),
            hint="download it where the hub is reachable and pass --from PATH, set HF_ENDPOINT to a mirror, "
            "or try --source modelscope",
        )
    try:
        ds = load_dataset(repo, config, split=split, streaming=bool(limit))
    except ValueError as e:
        if "split" in str(e).lower():
            return iter(())
        raise _hub_error(e, repo, where) from None
    except Exception as e:
        raise _hub_error(e, repo, where) from None
    return (Row(dict(r), f"{repo}[{split}]", i + 1) for i, r in enumerate(ds))


def modelscope_endpoint() -> str:
    import os

    domain = os.environ.get("MODELSCOPE_DOMAIN", "modelscope.cn")
    return domain if "://" in domain else f"https://{domain}"


def modelscope_files(repo: str) -> Path:
    """A ModelScope dataset's data files, downloaded (resumably) into trainctl's cache; read like a local copy.

    modelscope's MsDataset needs the `modelscope[datasets]` extra, which pins datasets<=4.8; the hub client that
    downloads files does not.
    """
    from trainctl import paths

    endpoint = modelscope_endpoint()
    if not reachable(endpoint):
        raise DataError(
            f"cannot reach ModelScope at {endpoint} to read {repo}.",
            hint="download it where ModelScope is reachable and pass --from PATH, or set MODELSCOPE_DOMAIN",
        )
    target = paths.cache_dir() / "modelscope" / repo.replace("/", "--")
    try:
        from modelscope.hub.snapshot_download import dataset_snapshot_download

        dataset_snapshot_download(
            repo, local_dir=str(target), allow_patterns=[f"*{s}" for s in SUFFIXES], endpoint=endpoint
        )
    except Exception as e:
        raise _hub_error(e, repo, f"ModelScope ({endpoint})") from None
    return target


# -- parsers for sources no column mapping describes ----------------------------------------------------------------

_TURN = re.compile(r"\n\n(Human|Assistant): ")


def _transcript(text: str) -> list[dict]:
    parts = _TURN.split("\n\n" + text.lstrip("\n")) if text else []
    turns = []
    for speaker, content in zip(parts[1::2], parts[2::2], strict=False):
        turns.append({"role": "user" if speaker == "Human" else "assistant", "content": content.strip()})
    return turns


def hh_rlhf(row: dict) -> Example:
    """Anthropic HH-RLHF: two Human:/Assistant: transcripts sharing everything but the last answer."""
    chosen, rejected = _transcript(row.get("chosen") or ""), _transcript(row.get("rejected") or "")
    if not chosen or not rejected or chosen[-1]["role"] != "assistant" or rejected[-1]["role"] != "assistant":
        raise Skip("a transcript does not end with an Assistant turn")
    if chosen[:-1] != rejected[:-1] or not chosen[:-1]:
        raise Skip("the two transcripts do not share a prompt")
    if not chosen[-1]["content"] or not rejected[-1]["content"]:
        raise Skip("an empty final answer")
    return Example(prompt=chosen[:-1], response=chosen[-1]["content"], chosen=chosen[-1:], rejected=rejected[-1:])


PARSERS = {"hh_rlhf": hh_rlhf}
