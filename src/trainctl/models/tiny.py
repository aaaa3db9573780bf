"""The tiny local models: a byte-level BPE tokenizer and a random Qwen2, built without any download; and a tiny
reward model (the same tokenizer and shape, a one-label classification head) for reward=model.

`trainctl model init tiny|tiny-rm`, `make demo` and the tests all build them here. Seeded: the files are the same
every time.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from trainctl.paths import atomic_write_text

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# ChatML, as Qwen2.5 writes it (without the default system prompt)
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def _arch(name: str = "tiny") -> dict:
    """The architecture a tiny model option declares (conf/model/tiny.yaml, tiny-rm.yaml)."""
    import yaml

    from trainctl.paths import builtin_conf_dir

    return yaml.safe_load((builtin_conf_dir() / "model" / f"{name}.yaml").read_text())["arch"]


def build_tokenizer():
    """Train the BPE with exactly Qwen2's normalizer and pre-tokenizer, so ids survive AutoTokenizer's reload."""
    from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers, trainers
    from tokenizers.models import BPE
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX, Qwen2Tokenizer

    from trainctl.data.arith import corpus_lines

    arch = _arch()
    tok = Tokenizer(BPE(unk_token=None, continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=arch["vocab_size"] - len(SPECIAL_TOKENS),
        special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    words = [
        "the",
        "a",
        "is",
        "of",
        "and",
        "to",
        "in",
        "what",
        "step",
        "think",
        "output",
        "final",
        "answer",
        "user",
        "assistant",
        "system",
    ]
    tok.train_from_iterator([*corpus_lines(), " ".join(words)], trainer=trainer)
    state = json.loads(tok.to_str())["model"]
    vocab = state["vocab"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in state["merges"]]
    hf = Qwen2Tokenizer(
        vocab=vocab,
        merges=merges,
        unk_token="<|endoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
    )
    hf.chat_template = CHAT_TEMPLATE
    hf.model_max_length = 1024
    return hf


def _config(tokenizer, arch: dict, **extra):
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=max(arch["vocab_size"], len(tokenizer)),
        hidden_size=arch["hidden_size"],
        intermediate_size=arch["intermediate_size"],
        num_hidden_layers=arch["layers"],
        num_attention_heads=arch["heads"],
        num_key_value_heads=arch["kv_heads"],
        max_position_embeddings=1024,
        tie_word_embeddings=arch["tie_embeddings"],
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        dtype="float32",
        **extra,
    )


def build_reward_model(tokenizer, seed: int = 1):
    """A random Qwen2ForSequenceClassification with one label: its logit for a conversation is the reward."""
    import torch
    from transformers import Qwen2ForSequenceClassification

    arch = _arch("tiny-rm")
    torch.manual_seed(seed)
    return Qwen2ForSequenceClassification(_config(tokenizer, arch, num_labels=1))


def build_model(tokenizer, seed: int = 0):
    import torch
    from transformers import Qwen2ForCausalLM

    # the embedding is padded to the declared vocabulary size, as Qwen's own checkpoints are
    config = _config(tokenizer, _arch())
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    return model


BUILT = ("tiny", "tiny-rm")


def init_tiny(out: Path, force: bool = False, name: str = "tiny") -> Path:
    """Write a tiny model (`tiny`, or the reward model `tiny-rm`) to `out` (built in a temporary folder, then
    renamed into place)."""
    out = Path(out).expanduser()
    if (out / "config.json").is_file() and not force:
        return out
    from transformers.utils import logging as hf_logging

    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tok = build_tokenizer()
    model = build_reward_model(tok) if name == "tiny-rm" else build_model(tok)
    tmp.mkdir(parents=True)
    tok.save_pretrained(tmp)
    hf_logging.disable_progress_bar()
    model.save_pretrained(tmp, safe_serialization=True)
    atomic_write_text(
        tmp / "trainctl-model.json", json.dumps({"name": name, "source": f"trainctl model init {name}"}) + "\n"
    )
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out
