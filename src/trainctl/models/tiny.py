"""The tiny local models: a byte-level BPE tokenizer and a random Qwen2, built without any download; and a tiny
reward model (the same tokenizer and shape, a one-label classification head) for reward=model.

`trainctl model init tiny|tiny-rm`, `make demo` and the tests all build them here. Seeded: the files are the same
every time.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

from trainctl.paths import atomic_write_text

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen2.5's ChatML template with tools, shortened for a tokenizer trained on arithmetic: hermes tool calls
# (`<tool_call>{json}</tool_call>` in assistant turns), results in `<tool_response>` blocks of a user turn, the tool
# schemas as JSON lines inside `<tools></tools>` in the system turn; Qwen's English instructions around the schemas
# (~560 tokens with this tokenizer) and its default system prompt are left out. A conversation with neither a system
# message nor tools renders as plain ChatML. verl's tool agent loop renders the schemas into the system turn and
# appends tool results turn by turn; both must agree with rendering the whole conversation at once.
CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n\\n' }}{%- endif %}"
    "{{- '<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools><|im_end|>\\n' }}"
    "{%- elif messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'system' and loop.first %}"
    "{%- elif message['role'] == 'user' or message['role'] == 'system'"
    " or (message['role'] == 'assistant' and not message['tool_calls']) %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant' }}"
    "{%- if message['content'] %}{{- '\\n' + message['content'] }}{%- endif %}"
    "{%- for tool_call in message['tool_calls'] %}"
    "{%- if tool_call['function'] is defined %}{%- set tool_call = tool_call['function'] %}{%- endif %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' + tool_call['name'] + '\", \"arguments\": ' }}"
    "{%- if tool_call['arguments'] is string %}{{- tool_call['arguments'] }}"
    "{%- else %}{{- tool_call['arguments'] | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def _arch(name: str = "tiny") -> dict:
    """The architecture a tiny model option declares (conf/model/tiny.yaml, tiny-rm.yaml)."""
    import yaml

    from trainctl.paths import builtin_conf_dir

    return yaml.safe_load((builtin_conf_dir() / "model" / f"{name}.yaml").read_text())["arch"]


def tool_lines(n: int = 5) -> list[str]:
    """Tool-use text as the chat template writes it (the calculator's schema, hermes calls and responses), for the
    tokenizer to learn: without it the schema alone costs ~200 tokens of every tool prompt; with it a whole tool
    demonstration is ~180 tokens instead of ~440, and arith text tokenizes as before."""
    import json

    from trainctl.data.arith import problems
    from trainctl.data.tools import CALCULATOR, calculator_schema, expression

    lines = []
    for p in problems(n, seed=0, split="tokenizer-tools"):
        call = json.dumps({"name": CALCULATOR, "arguments": {"expression": expression(p)}})
        lines += [f"<tools>\n{json.dumps(calculator_schema())}\n</tools>", f"<tool_call>\n{call}\n</tool_call>"]
        lines.append(f"<tool_response>\n{p.answer}\n</tool_response>")
    return lines


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
    tok.train_from_iterator([*corpus_lines(), *tool_lines(), " ".join(words)], trainer=trainer)
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


def build_model(tokenizer, seed: int = 0, arch: dict | None = None):
    """A random Qwen2 of the tiny option's architecture (or `arch`, same keys) over the tiny tokenizer."""
    import torch
    from transformers import Qwen2ForCausalLM

    # the embedding is padded to the declared vocabulary size, as Qwen's own checkpoints are
    config = _config(tokenizer, arch or _arch())
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    return model


BUILT = ("tiny", "tiny-rm", "tiny-tools")


def fetch_command(name: str) -> str:
    """The command that puts a model option's weights where its `path` points: built here, or pulled."""
    return f"trainctl model init {name}" if name in BUILT else f"trainctl model pull {name}"


def init_tiny(
    out: Path, force: bool = False, name: str = "tiny", progress=None, seed: int = 0, train: bool = False
) -> Path:
    """Write a tiny model (`tiny`, the reward model `tiny-rm`, or `tiny-tools`) to `out` (built in a temporary folder,
    then renamed into place). `progress(n)` is told of each warm-start step of tiny-tools, whose warm start `seed`
    seeds (seed 0's ships with trainctl: copied unless `train`); how it ended goes into `trainctl-model.json`."""
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
    record = {"name": name, "source": f"trainctl model init {name}"}
    if name == "tiny-tools":
        # the tiny model taught to call the calculator (trainctl.models.tool_warm_start)
        from trainctl.models.tool_warm_start import init_tiny_tools

        base = tmp.with_name(f".{out.name}.base")
        shutil.rmtree(base, ignore_errors=True)
        tmp.rename(base)
        warm = init_tiny_tools(base, tmp, seed=seed, progress=progress, train=train)
        shutil.rmtree(base)
        record["warm_start"] = {**dataclasses.asdict(warm), "seed": seed}
    atomic_write_text(tmp / "trainctl-model.json", json.dumps(record) + "\n")
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out


def ship_tiny_tools(progress=None):
    """Run tiny-tools' warm start of seed 0 here and put it where trainctl ships it (tool_warm_start.SHIPPED), with
    the digest of its inputs; returns how it ended."""
    import tempfile

    from trainctl.models.tool_warm_start import SHIPPED, demonstrations, init_tiny_tools, inputs_digest

    with tempfile.TemporaryDirectory() as tmp:
        base = init_tiny(Path(tmp) / "tiny")
        rows, probe = demonstrations(0)
        warm = init_tiny_tools(base, Path(tmp) / "tiny-tools", seed=0, progress=progress, train=True)
        SHIPPED.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(tmp) / "tiny-tools" / "model.safetensors", SHIPPED / "model.safetensors")
        ended = {k: v for k, v in dataclasses.asdict(warm).items() if k != "shipped"}
        record = {"inputs": inputs_digest(base, rows, probe), "warm_start": ended}
        (SHIPPED / "warm_start.json").write_text(json.dumps(record, indent=1) + "\n")
    return warm


if __name__ == "__main__":  # python -m trainctl.models.tiny: remake the shipped tiny-tools (after its inputs change)
    print(ship_tiny_tools())
