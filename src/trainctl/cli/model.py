"""`trainctl model ...`: the models the `model` group names: pull, list, inspect, build the tiny one, remove."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from trainctl.cli.common import (
    OVERRIDE_CONTEXT,
    ConfigDirs,
    DryRun,
    Overrides,
    byte_progress,
    command_overrides,
    render_warnings,
    search_path,
    tethered,
)

app = typer.Typer(
    help="Models: pull from Hugging Face or ModelScope, list, inspect (with a memory estimate), build the tiny one.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


def _err(line: str) -> None:
    typer.echo(line, err=True)


@contextlib.contextmanager
def _exit_at_once_on_ctrl_c():
    """Ctrl-C stops a pull now. A KeyboardInterrupt would first wait for the hub client's download threads (each
    retrying a stalled connection for minutes); what they wrote is kept, and the next run resumes from it."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        os.write(2, b"\nInterrupted: run the same command again to resume.\n")
        os._exit(130)

    previous = signal.signal(signal.SIGINT, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@app.command(
    epilog="""\
\b
Examples:
  trainctl model pull qwen2.5-7b                        to where model=qwen2.5-7b reads it
  trainctl model pull qwen2.5-7b --source modelscope    from ModelScope
  trainctl model pull Qwen/Qwen3-8B --revision main     any repository id
  trainctl model pull llama3-8b-instruct --dry-run      what would be downloaded, and how much
  HF_ENDPOINT=https://hf-mirror.com trainctl model pull qwen3-8b
\b
Takes safetensors weights, config, tokenizer and chat template; not the same weights again as .bin, .pth,
.gguf or original/ (--include GLOB to take them). Run it again to resume an interrupted pull.
HF_TOKEN (or `hf auth login`) for gated models; it is never printed or saved.
"""
)
def pull(
    name: Annotated[str, typer.Argument(help="a model option (qwen2.5-7b) or a repository id (Qwen/Qwen2.5-7B)")],
    source: Annotated[
        str, typer.Option("--source", help="hf, modelscope, or auto (the hub, else ModelScope when it is unreachable)")
    ] = "auto",
    revision: Annotated[str | None, typer.Option("--revision", help="a branch, tag or commit")] = None,
    dir: Annotated[Path | None, typer.Option("--dir", help="where to put it (default: the option's path)")] = None,
    include: Annotated[
        list[str] | None, typer.Option("--include", help="also take files matching this glob (repeatable)")
    ] = None,
    checksum: Annotated[
        bool, typer.Option("--checksum", help="also compare every weight file's sha256 with the hub's")
    ] = False,
    dry_run: DryRun = False,
    config_dirs: ConfigDirs = None,
) -> None:
    """Download a model into the folder its name points at, then verify it."""
    from trainctl.models.pull import human
    from trainctl.models.pull import pull as run

    if not sys.stderr.isatty():
        # the hub clients' progress bars are for terminals; in a log they are noise (tqdm reads TQDM_DISABLE
        # when it is first imported, for modelscope's bars)
        os.environ.setdefault("TQDM_DISABLE", "1")
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    with _exit_at_once_on_ctrl_c(), byte_progress("pulling") as progress:
        result = run(
            name, source, revision, dir, include or [], dry_run, checksum, _err, progress, search_path(config_dirs)
        )
    where = f"{result.repo} @ {result.commit[:12]} from {result.source} ({result.endpoint})"
    if dry_run:
        typer.echo(f"Would download {where} into {result.ref.path}:")
        for f in result.files:
            typer.echo(f"  {f.path:<48} {human(f.size):>10}")
        typer.echo(f"{len(result.files)} files, {human(result.total)}; {human(result.to_download)} not yet here.")
        return
    typer.echo(f"Pulled {where}: {len(result.files)} files, {human(result.total)}, verified, into {result.ref.path}")
    if result.ref.option:
        typer.echo(f"Train on it: trainctl train model={result.ref.name} ...")
    else:
        typer.echo(f"Train on it: trainctl train model.path={result.ref.path} ...")


@app.command(
    "import",
    epilog="""\
\b
Examples:
  trainctl model import SmolLM2-135M-Instruct.Q4_1.gguf --name smollm2-135m   where model=smollm2-135m reads it
  trainctl model import ~/Downloads/my-model.gguf --name smol    a model of its own: model=smol, eval smol, ...
  trainctl model import ~/hf/some-model --name some-model        a Hugging Face folder (.bin weights too)
\b
A GGUF file's weights are dequantized to float32 (training needs them unquantized); its tokenizer and chat template
come from its metadata. Checked before it is kept: the saved model loads, gives the source's logits and answers a
question. Nothing is left half-written: an import that fails leaves the target as it was.
A new name becomes a model option like a shipped one (its file in ~/.trainctl/conf/model/: architecture, size,
source file and checksum); a shipped option's name fills that option's folder, and is refused for a model of
another architecture.
""",
)
def import_(
    source: Annotated[Path, typer.Argument(help="a .gguf file or a Hugging Face model folder")],
    name: Annotated[
        str | None, typer.Option("--name", help="the model's name: a new one (model=NAME), or a model option's")
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="where to write it (default: the name's folder)")] = None,
    force: Annotated[bool, typer.Option("--force", help="replace what is there (once the import succeeded)")] = False,
    config_dirs: ConfigDirs = None,
) -> None:
    """Import a model from a GGUF file (llama.cpp, Ollama) or a Hugging Face folder, as safetensors to train."""
    from trainctl.models.importer import import_model

    if not sys.stderr.isatty():
        os.environ.setdefault("TQDM_DISABLE", "1")  # the dequantization's bar (tqdm reads it when first imported)

    m = import_model(source, name, out, force, search_path(config_dirs), status=_err)
    how = f"GGUF: {m.quantization}, dequantized to {m.dtype}" if m.kind == "gguf" else f"a folder, {m.dtype}"
    typer.echo(f"Imported {m.source.name} ({how}): {m.architecture}, {m.params / 1e6:.1f}M parameters, into {m.path}")
    typer.echo(f"Checked in {m.seconds:.0f} s: it loads, matches the source, and answers {m.answer!r}")
    for note in m.notes:
        typer.echo(f"Note: {note}")
    if m.option_file is not None:
        typer.echo(f"Named {m.name}: model={m.name} everywhere (eval, chat, model serve; its option: {m.option_file})")
    typer.echo(f"Train on it: trainctl train {f'model={m.name}' if m.option else f'model.path={m.path}'} ...")


@app.command(
    "ls",
    epilog="""\
\b
Examples:
  trainctl model ls                          every model option, and every model folder under ~/.trainctl/models
  trainctl model ls --config-dir team-conf   with the model options of your own config folder (./conf is read too)
""",
)
def ls(config_dirs: ConfigDirs = None) -> None:
    """The models trainctl knows: where each lives, its size on disk, whether it is whole, its revision."""
    from rich.table import Table

    from trainctl.cli.common import stdout_console
    from trainctl.models.catalog import catalog
    from trainctl.models.pull import human

    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("model", "kind", "repository", "on disk", "size", "revision", "path"):
        table.add_column(col)
    for e in catalog(search_path(config_dirs)):
        d = e.disk
        state = "-" if not d.exists else ("complete" if d.complete else f"incomplete: {d.problem}")
        commit = d.manifest.get("commit") or ""
        rev = f"{d.manifest.get('revision', '')} {commit[:8]}".strip() if commit else "-"
        kind = e.kind.replace("_", "-")
        source = e.repo or (
            f"imported: {Path(d.manifest['imported_from']).name}" if d.manifest.get("imported_from") else "-"
        )
        table.add_row(e.name, kind, source, state, human(d.size_bytes) if d.exists else "-", rev, str(d.path))
    stdout_console().print(table)


def _linear_layers(m) -> str:
    """The blocks' linear layers, by name: what lora.target_modules may name (read off the architecture)."""
    from trainctl.models.modules import model_modules

    try:
        found = model_modules(m.path, m.architecture)
    except (LookupError, OSError, ValueError) as e:
        return f"unknown ({e})"
    return ", ".join(found.linear) + " (lora.target_modules)" if found else "unknown"


@app.command(
    context_settings=OVERRIDE_CONTEXT,
    epilog="""\
\b
Examples:
  trainctl model info qwen2.5-7b                                 the model, and training it as configured
  trainctl model info qwen2.5-7b algorithm=grpo hardware=8gpu    GRPO on one 8-GPU node
  trainctl model info ~/models/my-model hardware=1gpu algorithm=sft
""",
)
def info(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="a model option, a repository id, or a model folder")],
    overrides: Overrides = None,
    explain: Annotated[bool, typer.Option("--explain", help="also print how the estimate is computed")] = False,
    config_dirs: ConfigDirs = None,
) -> None:
    """What a model is, and the memory training it takes per GPU (with what to change when it does not fit).

    The estimate uses the run's own config: add the groups and settings you would pass to `trainctl train`.
    """
    from rich.table import Table

    from trainctl.cli.common import stdout_console
    from trainctl.models.catalog import read_manifest, resolve_ref
    from trainctl.models.info import model_info
    from trainctl.models.memory import GiB, count, estimate, fixes, setup_from, size
    from trainctl.models.pull import human
    from trainctl.plan import resolve

    words, search = command_overrides(ctx, overrides, config_dirs)
    m = model_info(name, search)
    ref = resolve_ref(name, search=search)
    model_words = [f"model={ref.name}"] if ref.option else [f"model.path={m.path}"]
    plan = resolve([*model_words, *words], search)

    console = stdout_console()
    t = Table(box=None, show_header=False, pad_edge=False)
    t.add_row("model", m.name)
    t.add_row(
        "path",
        f"{m.path} ({'complete' if m.complete else 'incomplete'}, {human(m.size_bytes)})"
        if m.on_disk
        else f"{m.path} (not pulled)",
    )
    t.add_row("architecture", m.architecture)
    t.add_row("parameters", f"{m.params:,} ({count(m.params)}; {m.params_how})")
    t.add_row("dtype", m.dtype or "unknown until pulled")
    t.add_row(
        "shape",
        f"{m.layers} layers, hidden {m.hidden_size}, {m.heads} heads ({m.kv_heads} KV), MLP {m.intermediate_size}, "
        f"vocab {m.vocab_size:,}{', tied embeddings' if m.tie_embeddings else ''}",
    )
    t.add_row("context length", str(m.context_length or "?"))
    t.add_row("linear layers", _linear_layers(m))
    t.add_row(
        "chat template", "unknown until pulled" if m.chat_template is None else ("yes" if m.chat_template else "no")
    )
    imported = read_manifest(m.path) if m.on_disk else {}
    if imported.get("imported_from"):  # `model import`'s record
        t.add_row("imported from", f"{imported['imported_from']} (sha256 {imported.get('source_sha256') or '?'})")
    console.print(t)

    s = setup_from(plan.cfg, plan.value)
    e = estimate(m, s)
    hw = plan.cfg.hardware
    unit = "GPU" if s.device == "cuda" else "process"
    what = f"{plan.cfg.algorithm.name} on hardware={hw.name} ({s.world} {unit}{'s' if s.world > 1 else ''})"
    budget = f"{s.budget / GiB:.0f} GiB" if s.budget else "unknown (hardware.gpu_memory_gb is null)"
    console.print(f"\nMemory per {unit}, training {what}; budget {budget}:")
    m_table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("phase", "part", "memory", "how"):
        m_table.add_column(col, justify="right" if col == "memory" else "left")
    for phase, parts, total in (("training", e.train, e.train_total), ("rollout", e.rollout, e.rollout_total)):
        for p in parts:
            m_table.add_row(phase, p.what, size(p.bytes), p.how)
            phase = ""
        if parts:
            m_table.add_row("", "total", size(total), "")
    console.print(m_table)
    for problem in e.problems:
        console.print(f"Problem: {problem}.")
    if e.fits is None:
        console.print(f"Peak {size(e.peak)} per device.")
    elif e.fits:
        console.print(f"Fits: peak {size(e.peak)} of {budget}.")
    else:
        console.print(f"Does not fit: peak {size(e.peak)} of {budget}.")
        found = fixes(m, s)
        if found:
            console.print("Changes that make it fit:")
            for f in found:
                console.print(f"  {f.text:<72} -> {size(f.estimate.peak)}")
        else:
            console.print("No change trainctl knows of makes it fit: use more GPUs or GPUs with more memory.")
    if explain:
        import trainctl.models.memory as memory

        console.print("\n" + (memory.__doc__ or "").strip(), markup=False, highlight=False)
    else:
        console.print("An upper bound (every sequence at full length); --explain says how it is computed.")


@app.command(
    epilog="""\
\b
Examples:
  trainctl model init tiny                 build it where model=tiny looks for it
  trainctl model init tiny --out /tmp/m    somewhere else
  trainctl model init tiny-rm              a reward model of its shape: reward=model reward.model=tiny-rm
  trainctl model init tiny-tools           tiny, warm-started to call the calculator (shipped): tools=calculator
  trainctl model init tiny-tools --force --seed 1   another warm start, run here (1-3 min)
  trainctl model init tiny-tools --force --train    seed 0's warm start run here rather than copied
"""
)
def init(
    name: Annotated[str, typer.Argument(help="the model to build: tiny, the reward model tiny-rm, or tiny-tools")],
    out: Annotated[
        Path | None, typer.Option("--out", help="where to write it (default: the model group's path)")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="rebuild even if it is already there")] = False,
    seed: Annotated[
        int, typer.Option("--seed", help="tiny-tools: the warm start's seed (its demonstrations' order, the picks)")
    ] = 0,
    train: Annotated[
        bool,
        typer.Option("--train", help="tiny-tools: run seed 0's warm start here, not copy the one trainctl ships"),
    ] = False,
) -> None:
    """Build a tiny local model (tokenizer and random Qwen2 weights): tiny, the one the demo and the tests train, or
    tiny-rm, a reward model of its shape (reward=model reward.model=tiny-rm), or tiny-tools, tiny after a short
    warm start on calculator calls (the agent recipe's model)."""
    from trainctl.config.load import load
    from trainctl.errors import TrainctlError
    from trainctl.models.tiny import BUILT, init_tiny

    if name not in BUILT:
        raise TrainctlError(
            f"only {' and '.join(BUILT)} are built locally; {name!r} comes from a hub.",
            hint=f"trainctl model pull {name}",
        )
    if (seed != 0 or train) and name != "tiny-tools":
        option = f"--seed {seed}" if seed != 0 else "--train"
        raise TrainctlError(
            f"{option}: only tiny-tools has a warm start ({name}'s weights are always the same).",
            hint=f"trainctl model init {name}",
        )
    target = out or Path(load([f"model={name}"]).cfg.model.path)
    existed = (target / "config.json").is_file()
    if name == "tiny-tools" and (force or not existed):
        from trainctl.cli.common import progress_bar
        from trainctl.models.tool_warm_start import MAX_STEPS

        with progress_bar("warm start (stops once it calls the calculator right)", MAX_STEPS) as progress:
            path = init_tiny(target, force=force, name=name, progress=progress, seed=seed, train=train)
    else:
        path = init_tiny(target, force=force, name=name)
    what = {"tiny-rm": "tiny reward model", "tiny-tools": "tiny tool-calling model"}.get(name, "tiny model")
    typer.echo(f"{'Already there' if existed and not force else 'Built'}: {what} at {path}")
    warm = json.loads((path / "trainctl-model.json").read_text()).get("warm_start")
    if name == "tiny-tools" and not warm:
        typer.echo(
            "It was built by an older trainctl (a short warm start that always calls the calculator, from which the "
            f"agent recipe learns nothing): trainctl model init tiny-tools --force{f' --out {out}' if out else ''}"
        )
    elif warm:
        made = " (the one trainctl ships; --force --train runs it here)" if warm.get("shipped") else ""
        typer.echo(
            f"Warm start{made}: {warm['steps']} steps. Of {warm['probed']} held-out questions it calls the calculator "
            f"for {warm['calls_greedy']} (greedily; {warm['call_share']:.0%} of samples), copies the expression "
            f"right into {warm['calls_right']} calls and writes the calculator's answer as the final answer for "
            f"{warm['answers_right']}"
        )


@app.command(
    epilog="""\
\b
Examples:
  trainctl model rm qwen2.5-7b           asks first
  trainctl model rm Qwen/Qwen3-8B --yes
  trainctl model rm smol --yes           an imported model: its folder and its option file
"""
)
def rm(
    name: Annotated[str, typer.Argument(help="a model option, or a repository id that was pulled")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask")] = False,
    config_dirs: ConfigDirs = None,
) -> None:
    """Remove a pulled or imported model's folder (and the option file of one imported under a name of its own)."""
    from trainctl.errors import TrainctlError, UsageError
    from trainctl.models.catalog import folder_size, imported_option, resolve_ref
    from trainctl.models.pull import human, remove

    search = search_path(config_dirs)
    ref = resolve_ref(name, search=search)
    option = imported_option(name, search) if ref.option else None
    if not ref.path.exists() and option is None:
        raise TrainctlError(f"{ref.label} is not on disk ({ref.path}).", hint="trainctl model ls")
    what = f"{ref.path} ({human(folder_size(ref.path))})" if ref.path.exists() else ""
    what += (" and " if what else "") + f"model={name}'s option file {option}" if option else ""
    if not yes:
        if not sys.stdin.isatty():
            raise UsageError(f"removing {what} needs a yes: pass --yes (stdin is not a terminal).")
        if not typer.confirm(f"Remove {what}?", default=False):
            typer.echo("Kept.")
            return
    typer.echo("Removed " + " and ".join(map(str, remove(name, search))))


@app.command(
    context_settings=OVERRIDE_CONTEXT,
    epilog="""\
\b
Examples:
  trainctl model serve tiny                                 the tiny model on http://127.0.0.1:8000/v1
  trainctl model serve runs/grpo --port 8001                a run's latest checkpoint (merged into the cache once)
  trainctl model serve runs/grpo/checkpoints/global_step_40 temperature=0.7
  SERVE_TOKEN=... trainctl model serve runs/grpo --host 0.0.0.0 --token-env SERVE_TOKEN
  trainctl model serve qwen2.5-7b hardware=1gpu             vLLM's OpenAI server on a GPU
\b
Then, from any OpenAI client:
  curl http://127.0.0.1:8000/v1/chat/completions -H 'Content-Type: application/json' \\
       -d '{"model": "tiny", "messages": [{"role": "user", "content": "What is 2 + 3?"}]}'
  OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="unused").chat.completions.create(...)
\b
Defaults of every request: the run's validation settings (greedy unless val_kwargs say otherwise) and
data.max_response_length tokens, so an answer is the one `trainctl eval` scores; the words temperature, top_p,
top_k, max_tokens and seed change them. Tool calls in answers are parsed with the run's format (tools.format).
\b
Exit codes: 0 served and stopped, 1 a problem found before loading (the model, checkpoint, base model, port),
2 a usage error (a non-loopback --host without --token-env), 130 stopped by Ctrl-C.
""",
)
@tethered
def serve(
    ctx: typer.Context,
    model: Annotated[
        str, typer.Argument(help="a model option, a Hugging Face folder, a run folder, or one checkpoint (as eval)")
    ],
    overrides: Overrides = None,
    host: Annotated[str, typer.Option("--host", help="the address to listen on (loopback unless a token is set)")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option("--port", help="the port to listen on (0: any free port)")] = 8000,
    token_env: Annotated[
        str | None,
        typer.Option(
            "--token-env",
            help="the environment variable holding the bearer token every request must send; required for a "
            "non-loopback --host",
            show_default=False,
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option("--name", help="the model id clients send (default: the model option, run or folder name)"),
    ] = None,
    config_dir: ConfigDirs = None,
) -> None:
    """Serve a model, run or checkpoint as an OpenAI-compatible API: /v1/models, /v1/chat/completions,
    /v1/completions, streaming included.

    With hardware.rollout_engine=hf (hardware=cpu's default): trainctl's batched sampler (the one `trainctl eval`
    generates with) behind a small HTTP server; with vllm (GPU hardware's default, and on the CPU through vLLM's CPU
    build: hardware=cpu hardware.rollout_engine=vllm): vLLM's own OpenAI server.
    """
    from trainctl.inference.model import prepare
    from trainctl.inference.server import read_token

    words, search = command_overrides(ctx, overrides, config_dir)
    token = read_token(host, token_env)
    served = prepare(model, words, name=name, search=search)
    render_warnings(served.warnings)
    if served.engine != "hf":
        _serve_vllm(served, host, port, token)
        return
    _serve_cpu(served, host, port, token, token_env)


def _serve_cpu(served, host: str, port: int, token: str | None, token_env: str | None) -> None:
    from transformers.utils import logging as hf_logging

    from trainctl.inference.server import open_server

    hf_logging.disable_progress_bar()
    server = open_server(served, host, port, token, status=_err)
    s = served.sampling
    _err(f"Serving {served.describe()} as model {served.name!r}")
    _err(
        f"  engine: trainctl's batched CPU sampler (as `trainctl eval`); defaults: {_sampling_words(s)}, "
        f"tool calls: {served.tool_format}"
    )
    _err(
        "  auth: "
        + (f"a bearer token, from ${token_env}" if token else "none (loopback only; --token-env NAME to require one)")
    )
    _err(f"Ready: {server.url}  (Ctrl-C stops it)")
    server.run()


def _serve_vllm(served, host: str, port: int, token: str | None) -> None:
    from trainctl.inference import vllm
    from trainctl.inference.server import bind

    vllm.preflight(served)
    sock = bind(host, port)  # a port in use is said before the merge and vLLM's start
    port = sock.getsockname()[1]  # --port 0: the free port found, handed to vLLM
    sock.close()
    folder = served.folder()
    _err(f"Serving {served.describe()} as model {served.name!r} with vLLM's OpenAI server on http://{host}:{port}/v1")
    ready = f"Ready: http://{host}:{port}/v1  (Ctrl-C stops it)"
    code = vllm.run(served, folder, host, port, token, on_ready=lambda: _err(ready))
    if code not in (0, -2, 130):
        from trainctl.errors import RunFailed

        raise RunFailed(f"vLLM's server exited with code {code}.", hint="its output above says why")


def _sampling_words(s) -> str:
    how = "greedy" if s.greedy else f"temperature {s.temperature:g}, top_p {s.top_p:g}, top_k {s.top_k}"
    return f"{how}, max_tokens {s.max_tokens}"
