"""The vocabulary of a GGUF export: tokens, their types, merges, special tokens, chat template, and the name of the
pre-tokenizer llama.cpp must apply.

llama.cpp does not read a tokenizer's definition: it knows a fixed set of BPE pre-tokenizers by name
(`tokenizer.ggml.pre`) and refuses a file that names none of them. llama.cpp's converter names one by hashing the token
ids of a test string, a table that only knows the published tokenizers (the tiny models' own BPE is in none). Here the
name is read from the tokenizer's own definition instead (tokenizer.json's normalizer and pre-tokenizer): where that
definition is, rule for rule, one whose llama.cpp implementation is known, the vocabulary around it does not matter
(llama.cpp splits the text by those rules, then applies this file's merges). Anything else is refused with the
reason, before a byte is written; the export's verification then checks llama.cpp's ids against transformers' on
probe texts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from trainctl.ckpt.layout import CheckpointError

# Qwen2's split rule (Qwen2, Qwen2.5, Qwen3 and the tiny models, which train their BPE with it): one digit a token
_QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Llama 3's: the same with up to three digits a token
_LLAMA3 = _QWEN2.replace(r"|\p{N}|", r"|\p{N}{1,3}|")

# (normalizer, pre-tokenizer steps) -> llama.cpp's name. A step is ("split", regex) with behavior Isolated and no
# inversion, ("bytelevel", use_regex) with no prefix space, or ("digits", individual_digits). Normalizers: llama.cpp
# applies none; NFC changes no text that is already in NFC, and Qwen's own tokenizers carry it.
KNOWN: dict[tuple[str, tuple], str] = {
    ("nfc", (("split", _QWEN2), ("bytelevel", False))): "qwen2",
    ("none", (("split", _QWEN2), ("bytelevel", False))): "qwen2",
    ("none", (("split", _LLAMA3), ("bytelevel", False))): "llama-bpe",
    ("nfc", (("split", _LLAMA3), ("bytelevel", False))): "llama-bpe",
    # GPT-2's rules (byte-level with its regex): SmolLM2 as transformers reads it from a GGUF file
    ("none", (("bytelevel", True),)): "gpt-2",
    # SmolLM's published tokenizer: digits one by one, then GPT-2's rules
    ("none", (("digits", True), ("bytelevel", True))): "smollm",
}
DESCRIBED = {
    "qwen2": "Qwen2's split rule (one digit a token), byte-level",
    "llama-bpe": "Llama 3's split rule (up to three digits a token), byte-level",
    "gpt-2": "GPT-2's byte-level rules",
    "smollm": "digits one by one, then GPT-2's byte-level rules",
}


@dataclass
class Vocab:
    tokens: list[str]
    types: list[int]  # gguf.TokenType values
    pre: str  # llama.cpp's pre-tokenizer name
    pre_how: str  # how it was identified, for the verdict
    add_bos: bool  # transformers adds a BOS token to plain text
    add_eos: bool
    notes: list[str] = field(default_factory=list)


def _normalizer(n: dict | None) -> str | None:
    if n is None or (n.get("type") == "Sequence" and not n.get("normalizers")):
        return "none"
    if n.get("type") == "NFC":
        return "nfc"
    if n.get("type") == "Sequence" and len(n["normalizers"]) == 1:
        return _normalizer(n["normalizers"][0])
    return None


def _step(p: dict) -> tuple | None:
    kind = p.get("type")
    if kind == "Split" and p.get("behavior") == "Isolated" and not p.get("invert"):
        pattern = p.get("pattern") or {}
        return ("split", pattern["Regex"]) if "Regex" in pattern else None
    if kind == "ByteLevel" and not p.get("add_prefix_space"):
        return ("bytelevel", bool(p.get("use_regex", True)))
    if kind == "Digits":
        return ("digits", bool(p.get("individual_digits")))
    return None


def _describe(n: dict | None, p: dict | None) -> str:
    def one(x: dict) -> str:
        kind = x.get("type", "?")
        if kind == "Sequence":
            inner = x.get("pretokenizers") or x.get("normalizers") or []
            return "Sequence[" + ", ".join(one(i) for i in inner) + "]"
        extra = {k: v for k, v in x.items() if k not in ("type", "trim_offsets")}
        return f"{kind}{json.dumps(extra, ensure_ascii=False)[:160] if extra else ''}"

    return f"normalizer {one(n) if n else 'none'}; pre-tokenizer {one(p) if p else 'none'}"


def identify(tokenizer_json: dict, where: Path) -> tuple[str, str]:
    """llama.cpp's name for this tokenizer's pre-tokenizer, and how it was identified; CheckpointError when the
    tokenizer is not a byte-level BPE llama.cpp can reproduce."""
    model = tokenizer_json.get("model") or {}
    pre = tokenizer_json.get("pre_tokenizer")
    norm = tokenizer_json.get("normalizer")
    if model.get("type") != "BPE":
        raise CheckpointError(
            f"{where}: a {model.get('type', 'unknown')} tokenizer; trainctl exports byte-level BPE vocabularies "
            "(Llama 3, Qwen2, Qwen3, SmolLM2, the tiny models) to GGUF",
            details=[_describe(norm, pre)],
            hint="llama.cpp's own converter (convert_hf_to_gguf.py) handles SentencePiece and WordPiece vocabularies",
        )
    if pre and pre.get("type") == "Metaspace":
        raise CheckpointError(
            f"{where}: a SentencePiece-style BPE (Metaspace); trainctl exports byte-level BPE vocabularies to GGUF",
            details=[_describe(norm, pre)],
            hint="llama.cpp's own converter (convert_hf_to_gguf.py) handles SentencePiece vocabularies",
        )
    if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        raise CheckpointError(
            f"{where}: the BPE marks word pieces (a prefix or suffix), which llama.cpp's BPE does not",
            details=[_describe(norm, pre)],
        )
    steps = [pre] if pre and pre.get("type") != "Sequence" else list((pre or {}).get("pretokenizers") or [])
    parsed = [_step(s) for s in steps]
    key = (_normalizer(norm), tuple(parsed))
    name = KNOWN.get(key) if None not in parsed and key[0] is not None else None  # type: ignore[arg-type]
    if name is None:
        raise CheckpointError(
            f"{where}: llama.cpp would not recognise this tokenizer's pre-tokenizer, and it is none whose rules "
            "llama.cpp implements, so no name can be given soundly (a wrong one splits text differently). "
            "Nothing was written.",
            details=[
                _describe(norm, pre),
                "known: " + "; ".join(f"{n} ({d})" for n, d in DESCRIBED.items()),
            ],
            hint="llama.cpp's own converter names published tokenizers by a hash of their output "
            "(convert_hf_to_gguf.py); a model trained from one of the known families keeps its tokenizer",
        )
    how = f"from tokenizer.json's definition: {DESCRIBED[name]}"
    if key[0] == "nfc":
        how += " (its NFC normalizer is not applied by llama.cpp: text already in NFC is unchanged by it)"
    return name, how


def _looks_special(token: str) -> bool:
    return (token.startswith("<|") and token.endswith("|>")) or token in ("<pad>", "<mask>")


def read_vocab(folder: Path, n_vocab: int) -> Vocab:
    """Tokens by id up to the embedding's row count (ids the tokenizer does not use are unused padding tokens), their
    types (added tokens: control when special, else user-defined), the pre-tokenizer's name, and whether transformers
    adds BOS/EOS to plain text (written explicitly: llama.cpp's defaults differ by vocabulary)."""
    import gguf

    tj_path = folder / "tokenizer.json"
    if not tj_path.is_file():
        raise CheckpointError(
            f"{folder} has no tokenizer.json: a GGUF file carries its tokenizer, and trainctl reads it from there",
            hint="a model saved by transformers (save_pretrained) writes it; trainctl model import FOLDER does too",
        )
    tj = json.loads(tj_path.read_text())
    pre, how = identify(tj, tj_path)
    ids = dict(tj["model"]["vocab"])
    added = {a["id"]: a for a in tj.get("added_tokens") or []}
    for i, a in added.items():
        ids[a["content"]] = i
    by_id = {i: t for t, i in ids.items()}
    if by_id and max(by_id) >= n_vocab:
        raise CheckpointError(
            f"{tj_path}: token id {max(by_id)} is outside the model's embedding ({n_vocab} rows)",
            hint="the tokenizer and the weights come from different models",
        )
    tokens, types = [], []
    for i in range(n_vocab):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        elif i in added:
            tokens.append(by_id[i])
            special = added[i].get("special") or _looks_special(by_id[i])
            types.append(gguf.TokenType.CONTROL if special else gguf.TokenType.USER_DEFINED)
        else:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.NORMAL)
    add_bos, add_eos = _adds_special(folder)
    return Vocab(tokens, [int(t) for t in types], pre, how, add_bos, add_eos)


def _adds_special(folder: Path) -> tuple[bool, bool]:
    """Whether transformers' tokenizer puts a BOS before, or an EOS after, plain text."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    plain = tok("a b", add_special_tokens=False).input_ids
    full = tok("a b").input_ids
    bos = tok.bos_token_id is not None and len(full) > len(plain) and full[0] == tok.bos_token_id
    eos = tok.eos_token_id is not None and len(full) > len(plain) and full[-1] == tok.eos_token_id
    return bool(bos), bool(eos)


def add_to_writer(writer, folder: Path, vocab: Vocab) -> None:
    """The vocabulary, merges, special token ids and chat template, as llama.cpp reads them."""
    import gguf

    writer.add_tokenizer_model("gpt2")  # llama.cpp's name for byte-level BPE
    writer.add_tokenizer_pre(vocab.pre)
    writer.add_token_list(vocab.tokens)
    writer.add_token_types(vocab.types)
    special = gguf.SpecialVocab(folder, load_merges=True, n_vocab=len(vocab.tokens))
    if not special.merges:
        raise CheckpointError(f"{folder / 'tokenizer.json'} has no merges: not a BPE tokenizer llama.cpp can use")
    special.add_special_token = {"bos": vocab.add_bos, "eos": vocab.add_eos}
    special.add_to_gguf(writer, quiet=True)
