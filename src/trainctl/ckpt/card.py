"""Model cards (README.md, in the Hugging Face convention: YAML front matter, then prose) written beside every
`ckpt merge` and `ckpt export`, and the Ollama Modelfile beside a GGUF export.

What a card says comes from the run folder the checkpoint belongs to, as `runs show` reads it: the base model and the
lineage (lock.json), the data and the algorithm with the settings the run set (trainctl.yaml), the step, the held-out
metrics before and after, and the exact trainctl command (run.json). A model outside any run gets what its folder
says. A README.md or Modelfile that trainctl did not write is never replaced.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

# written into every file trainctl writes here, so that it replaces its own files and no one else's
MARK = "written by trainctl"
# licences of the shipped model options' base models (their Hugging Face cards); the tiny models are built by
# trainctl itself, under its licence
LICENSES = {
    "HuggingFaceTB/SmolLM2-135M-Instruct": "apache-2.0",
    "Qwen/Qwen2.5-0.5B-Instruct": "apache-2.0",
    "Qwen/Qwen2.5-1.5B-Instruct": "apache-2.0",
    "Qwen/Qwen2.5-3B-Instruct": "other (qwen-research)",
    "Qwen/Qwen2.5-7B-Instruct": "apache-2.0",
    "Qwen/Qwen2.5-14B-Instruct": "apache-2.0",
    "Qwen/Qwen2.5-32B-Instruct": "apache-2.0",
    "Qwen/Qwen2.5-72B-Instruct": "other (qwen)",
    "Qwen/Qwen3-0.6B": "apache-2.0",
    "Qwen/Qwen3-1.7B": "apache-2.0",
    "Qwen/Qwen3-4B": "apache-2.0",
    "Qwen/Qwen3-8B": "apache-2.0",
    "Qwen/Qwen3-14B": "apache-2.0",
    "Qwen/Qwen3-32B": "apache-2.0",
    "meta-llama/Meta-Llama-3-8B-Instruct": "llama3",
    "deepseek-ai/deepseek-llm-7b-chat": "other (deepseek)",
}
BUILT = {"tiny": "apache-2.0", "tiny-rm": "apache-2.0", "tiny-tools": "apache-2.0"}


@dataclass
class Origin:
    """Where a model came from, as far as its files tell."""

    title: str
    checkpoint: Path | None = None
    step: int | None = None
    run: Path | None = None
    record: dict = field(default_factory=dict)  # run.json
    tree: dict = field(default_factory=dict)  # trainctl.yaml
    base: str | None = None  # the model option (or folder) training started from
    base_repo: str | None = None
    license: str | None = None
    lineage: str | None = None
    held_out: list[str] = field(default_factory=list)
    metrics: dict = field(default_factory=dict)  # logged at the checkpoint's step


def run_of(path: Path) -> Path | None:
    """The run folder a checkpoint belongs to (runs/NAME/checkpoints/global_step_N -> runs/NAME)."""
    for parent in [path, *path.parents][:4]:
        if (parent / "run.json").is_file():
            return parent
    return None


def _json(path: Path) -> dict:
    try:
        found = json.loads(path.read_text())
        return found if isinstance(found, dict) else {}
    except (OSError, ValueError):
        return {}


def _folder_license(folder: Path) -> str | None:
    """The `license:` of a Hugging Face README.md's front matter."""
    try:
        text = (folder / "README.md").read_text()
    except OSError:
        return None
    if not text.startswith("---") or MARK in text:
        return None
    for line in text.split("---", 2)[1].splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "license" and value.strip():
            return value.strip()
    return None


def origin(checkpoint, folder: Path | None = None, base_dir: Path | None = None) -> Origin:
    """What the files say about a checkpoint (trainctl.ckpt.layout.Checkpoint) or a plain model folder; base_dir: the
    base model folder a LoRA adapter was folded into (its card may name its licence)."""
    import yaml

    path = checkpoint.path if checkpoint is not None else Path(folder)
    run = run_of(path.resolve())
    o = Origin(title=path.name, checkpoint=path, step=getattr(checkpoint, "step", None), run=run)
    o.metrics = dict(getattr(checkpoint, "metrics", None) or {})
    if run is not None:
        o.record = _json(run / "run.json")
        try:
            o.tree = yaml.safe_load((run / "trainctl.yaml").read_text()) or {}
        except (OSError, yaml.YAMLError):
            o.tree = {}
        o.title = o.record.get("name") or run.name
        model = o.tree.get("model") or {}
        o.base = o.record.get("model") or model.get("name")
        o.base_repo = model.get("hf_repo")
        lineage = _json(run / "lock.json").get("lineage")
        o.lineage = _lineage(lineage) if isinstance(lineage, dict) else None
        from trainctl.metrics import before_after

        try:
            o.held_out = before_after(run)
        except Exception:  # unreadable metrics leave the card without them, not the export
            o.held_out = []
    else:
        made = _json(path / "trainctl-model.json")
        o.base = made.get("name") or path.name
        o.base_repo = _repo_of(o.base)
    o.license = LICENSES.get(o.base_repo or "") or BUILT.get(o.base or "") or _folder_license(path)
    if o.license is None and base_dir is not None:
        o.license = _folder_license(Path(base_dir))
    return o


def _lineage(d: dict) -> str:
    """lock.json's lineage as `runs show` tells it (trainctl.ckpt.lineage.Lineage.describe, which imports the merge
    this module serves): `runs/sft step 16 (model=tiny) <- ...`."""
    text = str(d.get("run") or d.get("checkpoint") or "?")
    if d.get("step") is not None:
        text += f" step {d['step']}"
    if d.get("base"):
        text += f" (model={d['base']})"
    if isinstance(d.get("parent"), dict):
        text += f" <- {_lineage(d['parent'])}"
    return text


def _repo_of(name: str) -> str | None:
    """A model option's Hugging Face repo, when a folder is named after one."""
    try:
        from trainctl.config.load import load_option

        option = load_option("model", name)
    except Exception:  # not an option name, or a config folder that does not load: the card says less
        return None
    return getattr(option, "hf_repo", None) if option is not None else None


def _settings(o: Origin) -> list[tuple[str, str]]:
    tree = o.tree
    out = []
    algorithm = (tree.get("algorithm") or {}).get("name") or o.record.get("algorithm")
    if algorithm:
        out.append(("algorithm", f"{algorithm} ({o.record.get('backend', '?')})"))
    data = tree.get("data") or {}
    if data.get("name") or o.record.get("data"):
        source = data.get("data_source")
        out.append(("data", f"{data.get('name') or o.record.get('data')}" + (f" ({source})" if source else "")))
    reward = tree.get("reward") or {}
    if (tree.get("algorithm") or {}).get("family") in ("ppo", "grpo", "rl") or reward.get("name") not in (None, "rule"):
        out.append(("reward", str(reward.get("name"))))
    tools = tree.get("tools") or {}
    if tools.get("name") not in (None, "none"):
        out.append(("environment (tools)", str(tools.get("name"))))
    lora = tree.get("lora") or {}
    if lora.get("rank"):
        out.append(("LoRA", f"r={lora['rank']} alpha={lora.get('alpha')} on {lora.get('target_modules')}"))
    run = tree.get("run") or {}
    for key in ("epochs", "max_steps", "seed"):
        if run.get(key) is not None:
            out.append((key, str(run[key])))
    node = tree.get("verl") or tree.get("trl") or {}
    for key, value in _flatten(node):
        out.append((key, str(value)))
    return out


def _flatten(node, prefix: str = "") -> list[tuple[str, object]]:
    if not isinstance(node, dict):
        return [(prefix, node)]
    out = []
    for k, v in node.items():
        out += _flatten(v, f"{prefix}.{k}" if prefix else str(k))
    return out


def card(o: Origin, kind: str, files: list[dict] | None = None, usage: list[str] | None = None) -> str:
    """README.md for a merged model (kind "merge") or a GGUF export (kind "gguf"); files: the GGUF files beside it
    (name, dtype, size, verdict lines)."""
    front = ["---"]
    if o.license:
        front.append(f"license: {o.license.split(' ')[0]}")
        if o.license.startswith("other ("):
            front.append(f"license_name: {o.license[7:-1]}")
    if o.base_repo:
        front.append(f"base_model: {o.base_repo}")
    front.append("library_name: " + ("gguf" if kind == "gguf" else "transformers"))
    tags = [
        "trainctl",
        *([o.record["algorithm"]] if o.record.get("algorithm") else []),
        *(["gguf"] if kind == "gguf" else []),
    ]
    front.append("tags: [" + ", ".join(tags) + "]")
    front.append("---")
    title = o.title + (f" (step {o.step})" if o.step is not None else "")
    lines = [*front, f"<!-- {MARK}; it rewrites this file on every merge or export into this folder -->", ""]
    lines += [f"# {title}", ""]
    what = "GGUF files for llama.cpp, Ollama and LM Studio" if kind == "gguf" else "A Hugging Face (safetensors) model"
    lines += [f"{what}, made by `trainctl ckpt {'export' if kind == 'gguf' else 'merge'}`.", ""]
    lines += ["## Lineage", ""]
    lines.append(
        f"- base model: {o.base or 'unknown'}"
        + (f" ([{o.base_repo}](https://huggingface.co/{o.base_repo}))" if o.base_repo else "")
    )
    if o.lineage:
        lines.append(f"- started from: {o.lineage}")
    if o.run is not None:
        lines.append(f"- run: {o.run}")
    if o.checkpoint is not None:
        lines.append(f"- checkpoint: {o.checkpoint}" + (f" (step {o.step})" if o.step is not None else ""))
    lines.append(f"- licence of the base model: {o.license or 'unknown (see the base model card)'}")
    settings = _settings(o)
    if settings:
        lines += ["", "## Training", "", "| setting | value |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in settings]
    if o.held_out or o.metrics:
        lines += ["", "## Metrics", ""]
        if o.held_out:
            lines += ["Held-out, before -> after:", ""] + [f"- {m}" for m in o.held_out] + [""]
        shown = {k: v for k, v in sorted(o.metrics.items()) if not k.startswith("perf/") and isinstance(v, int | float)}
        if shown:
            lines += [f"At step {o.step}:", ""] + [f"- {k} = {v:.4g}" for k, v in list(shown.items())[:12]]
    if o.record.get("args") is not None:
        lines += ["", "## Reproduce", "", "```bash", f"trainctl train {' '.join(o.record['args'])}", "```"]
    if files:
        lines += ["", "## Files", "", "| file | type | size | verified by llama.cpp |", "|---|---|---|---|"]
        for f in files:
            lines.append(f"| {f['name']} | {f['dtype']} | {f['size']} | {f['verified']} |")
    if usage:
        lines += ["", "## Use it", "", "```bash", *usage, "```"]
    return "\n".join(lines) + "\n"


def chatml_system(tokenizer) -> tuple[bool, str | None]:
    """Whether the chat template is ChatML, and the system prompt it adds when a conversation has none."""
    if not tokenizer.chat_template:
        return False, None

    def render(messages):
        try:
            return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        except Exception:
            return None

    with_system = render([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])
    chatml = with_system == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    alone = render([{"role": "user", "content": "U"}]) or ""
    start, end = "<|im_start|>system\n", "<|im_end|>\n<|im_start|>user\nU"
    default = alone[len(start) : alone.index(end)] if chatml and alone.startswith(start) and end in alone else None
    return chatml, default


def modelfile(gguf_name: str, tokenizer, stops: list[str]) -> str:
    """An Ollama Modelfile for the file: ChatML models get the template and their default system prompt; for other
    templates Ollama reads the one the GGUF file carries."""
    chatml, system = chatml_system(tokenizer)
    lines = [f"# Ollama: ollama create NAME -f Modelfile, then ollama run NAME ({MARK})", f"FROM ./{gguf_name}"]
    if chatml:
        lines += [
            'TEMPLATE """{{- range .Messages }}<|im_start|>{{ .Role }}',
            "{{ .Content }}<|im_end|>",
            "{{ end }}<|im_start|>assistant",
            '"""',
        ]
        if system:
            lines.append(f'SYSTEM """{system}"""')
    else:
        lines.append("# the chat template: the one in the GGUF file (tokenizer.chat_template)")
    lines += [f'PARAMETER stop "{s}"' for s in stops]
    return "\n".join(lines) + "\n"


def write_ours(path: Path, text: str) -> bool:
    """Write a card or Modelfile, unless a file trainctl did not write is there (False: left alone)."""
    from trainctl.paths import atomic_write_text

    if path.exists():
        try:
            if MARK not in path.read_text():
                return False
        except (OSError, UnicodeDecodeError):
            return False
    atomic_write_text(path, text)
    return True
