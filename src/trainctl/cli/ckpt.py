"""`trainctl ckpt ...`: list, inspect, merge, rank and prune checkpoints of verl, TRL and ART runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trainctl.cli.common import DryRun, byte_progress

app = typer.Typer(
    help="Checkpoints: list, inspect and merge them into plain Hugging Face models; pick the best, prune the rest.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

_Target = Annotated[Path, typer.Argument(help="a run folder (runs/NAME), a checkpoints folder, or one checkpoint")]


def _model_folder(target: Path) -> Path:
    """TARGET as given, or, where no such path exists and it is a model's name (a shipped option, or one `model
    import --name` made), that model's folder."""
    if target.exists() or len(target.parts) != 1:
        return target
    from trainctl.errors import TrainctlError
    from trainctl.models.catalog import resolve_ref

    try:
        ref = resolve_ref(str(target))
    except TrainctlError:
        return target  # neither: the checkpoint listing says the path does not exist
    return ref.path if ref.option and ref.path.is_dir() else target


def say_passed_over(checkpoint) -> None:
    """Name the run's newer checkpoints that were passed over because their save did not finish."""
    for why in checkpoint.passed_over:
        typer.echo(f"  Note: passed over {why} (incomplete: nothing resumes from it or takes it as latest)", err=True)


def _size(n: int) -> str:
    from trainctl.models.pull import human

    return human(n)


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _shown_metrics(metrics: dict, wanted: list[str]) -> str:
    keys = (
        wanted
        or [
            k
            for k in (
                "train/loss",
                "val/loss",
                "critic/score/mean",
                "actor/pg_loss",
                "train/rewards/accuracies",
                "loss",
                "eval_loss",
                "reward",
            )
            if k in metrics
        ][:3]
    )
    return "  ".join(f"{k}={_fmt(metrics[k])}" for k in keys if k in metrics)


@app.command(
    "ls",
    epilog="""\
\b
Examples:
  trainctl ckpt ls runs/quickstart                  a trainctl run: steps with their logged metrics
  trainctl ckpt ls runs/grpo/checkpoints            verl's global_step_N folders
  trainctl ckpt ls out/dpo                          TRL's checkpoint-N folders
  trainctl ckpt ls .art/proj/models/agent-001       ART's checkpoints/NNNN adapters
  trainctl ckpt ls runs/quickstart -m train/loss    show these metrics (a name the run never logged is an error
                                                    that lists the ones it did)
""",
)
def ls(
    target: _Target,
    metric: Annotated[list[str] | None, typer.Option("--metric", "-m", help="a metric to show (repeatable)")] = None,
) -> None:
    """One row per checkpoint: layout, step, world size, what it holds, LoRA, size, metrics, and which is latest."""
    from rich.table import Table

    from trainctl.ckpt.layout import list_checkpoints
    from trainctl.ckpt.select import require_metric
    from trainctl.cli.common import stdout_console

    listing = list_checkpoints(target)
    for m in metric or []:
        require_metric(listing, m, f"trainctl ckpt ls {target} -m {{}}")
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("step", "layout", "world", "holds", "lora r/alpha", "size", "metrics", "path"):
        table.add_column(col, justify="right" if col in ("step", "size") else "left")
    for c in listing.checkpoints:
        part = c.part()
        world = "-"
        if part.world_size:
            world = f"{part.world_size}" + (f" (FSDP{part.fsdp_version})" if part.fsdp_version else "")
        holds = "; ".join(f"{p.name}: {'+'.join(p.holds)}" if len(c.parts) > 1 else "+".join(p.holds) for p in c.parts)
        lora = f"{part.lora[0]}/{part.lora[1]:g}" if part.lora else "-"
        step = ("" if c.step is None else str(c.step)) + (" *" if c.latest else " !" if c.incomplete else "")
        table.add_row(
            step, c.layout, world, holds, lora, _size(c.size), _shown_metrics(c.metrics, metric or []), str(c.path)
        )
    console = stdout_console()
    console.print(table)
    if len(listing.checkpoints) > 1:
        src = f"; metrics from {listing.metrics_source}" if listing.metrics_source else ""
        bad = " ! = incomplete," if any(c.incomplete for c in listing.checkpoints) else ""
        console.print(f"{len(listing.checkpoints)} checkpoints,{bad} * = latest{src}")
    for c in listing.checkpoints:
        if c.incomplete:
            console.print(f"Incomplete: {c.path.name}: {c.incomplete}; nothing resumes from it or merges it.")


@app.command(
    epilog="""\
\b
Examples:
  trainctl ckpt show runs/quickstart                           the latest checkpoint of a run
  trainctl ckpt show runs/quickstart/checkpoints/global_step_8
  trainctl ckpt show out/dpo/checkpoint-16
""",
)
def show(target: _Target) -> None:
    """What a checkpoint holds: saved config, tokenizer and chat template, tensors, dtypes and parameter count.
    Reads headers and memory-mapped, weights-only loads: never unpickles code, never reads the tensors' data."""
    from trainctl.ckpt.inspect import details
    from trainctl.models.memory import count

    d = details(target)
    c = d.checkpoint
    typer.echo(f"{c.path}")
    typer.echo(f"  layout      {c.layout}" + (f", step {c.step}" if c.step is not None else ""))
    typer.echo(f"  size        {_size(c.size)}")
    shown = [f"{k}={_fmt(v)}" for k, v in sorted(c.metrics.items()) if not k.startswith("perf/")]
    if shown:
        typer.echo(f"  metrics     {', '.join(shown)}")
    for p in d.parts:
        typer.echo(f"{p.part.name} ({p.part.kind}) at {p.part.path}")
        if p.part.world_size:
            version = f", FSDP{p.part.fsdp_version}" if p.part.fsdp_version else ""
            typer.echo(f"  world size  {p.part.world_size}{version}")
        typer.echo(f"  holds       {', '.join(p.part.holds)}")
        if p.config:
            arch = (p.config.get("architectures") or ["?"])[0]
            dims = ", ".join(
                f"{k}={p.config[k]}" for k in ("hidden_size", "num_hidden_layers", "vocab_size") if k in p.config
            )
            typer.echo(f"  config      {p.config_path} ({arch}; {dims})")
        else:
            typer.echo("  config      none")
        if p.base_model:
            typer.echo(f"  base model  {p.base_model}")
        if p.part.lora:
            typer.echo(f"  lora        r={p.part.lora[0]}, alpha={p.part.lora[1]:g}, {p.lora_tensors} tensors")
        typer.echo(
            f"  tokenizer   {'yes' if p.tokenizer else 'no'}; chat template {'yes' if p.chat_template else 'no'}"
        )
        dtypes = ", ".join(f"{k} x{v}" for k, v in sorted(p.dtypes.items()))
        typer.echo(f"  tensors     {p.tensors} ({dtypes}); {count(p.params)} parameters")


@app.command(
    epilog="""\
\b
Examples:
  trainctl ckpt merge runs/quickstart                          the latest step, beside it as global_step_N-hf
  trainctl ckpt merge runs/grpo --out models/grpo-step20 --dtype bf16
  trainctl ckpt merge runs/grpo --part critic                  the critic of a PPO run
  trainctl ckpt merge out/dpo-lora/checkpoint-16               a PEFT adapter folded into its base model
  trainctl ckpt merge .art/p/models/a/checkpoints/0012 --base ~/models/Qwen2.5-7B
  trainctl ckpt merge runs/quickstart --dry-run                what would be written, and where
""",
)
def merge(
    target: _Target,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="output folder (default: beside the step)")] = None,
    dtype: Annotated[str, typer.Option("--dtype", help="auto keeps the trained dtype; or bf16, fp16, fp32")] = "auto",
    base: Annotated[
        str | None, typer.Option("--base", help="an adapter's base model: a folder, model option or repo id")
    ] = None,
    part: Annotated[str | None, typer.Option("--part", help="actor (default) or critic, for PPO checkpoints")] = None,
    force: Annotated[bool, typer.Option("--force", help="replace an existing --out folder")] = False,
    max_shard_size: Annotated[
        float, typer.Option("--max-shard-size", help="GB per safetensors file; larger models get an index")
    ] = 5.0,
    dry_run: DryRun = False,
) -> None:
    """Merge a checkpoint into a Hugging Face safetensors model: FSDP shards joined, LoRA folded into its base,
    tokenizer and chat template copied; the output is read back and verified before it is renamed into place."""
    from trainctl.ckpt.merge import merge as run_merge
    from trainctl.ckpt.merge import plan_merge
    from trainctl.models.memory import count

    prepared = plan_merge(target, out, dtype, base, part, force)
    plan = prepared[0]
    what = f"{plan.part.name} of {plan.checkpoint.path}"
    typer.echo(f"Merging {what} ({plan.checkpoint.layout}, step {plan.checkpoint.step})", err=True)
    say_passed_over(plan.checkpoint)
    if plan.checkpoint.incomplete:  # named on its own: its weights may be whole (the merge reads every byte of them)
        typer.echo(f"  Note: this checkpoint is incomplete ({plan.checkpoint.incomplete}); its weights are", err=True)
        typer.echo("  merged as they are: a resume, `ckpt best` and `eval` of the run use the last whole one", err=True)
    if plan.base:
        r, alpha = plan.lora or (0, 0)
        typer.echo(f"  LoRA r={r} alpha={alpha:g} folded into {plan.base}", err=True)
    for note in plan.notes:
        typer.echo(f"  {note}", err=True)
    summary = f"{plan.tensors} tensors, {count(plan.params)} parameters, {_size(plan.bytes)} as {plan.dtype}"
    if dry_run:
        typer.echo(f"Would write {plan.out}: {summary}")
        return
    with byte_progress("merging") as progress:
        result = run_merge(prepared, max_shard_bytes=int(max_shard_size * 1e9), progress=progress)
    extra = f"; LoRA changed {result.changed_by_lora} tensors" if result.changed_by_lora else ""
    typer.echo(f"Wrote {plan.out}: {summary}, {len(result.files)} file(s), verified{extra} ({result.seconds:.1f} s)")


@app.command(
    epilog="""\
\b
Examples:
  trainctl ckpt export runs/quickstart --to gguf                 the latest step, f16, beside it in global_step_N-gguf/
  trainctl ckpt export runs/grpo --to gguf --dtype q8_0 --out models/grpo.gguf
  trainctl ckpt export ~/.trainctl/models/tiny --to gguf --dtype f32   a Hugging Face folder
  trainctl ckpt export smol --to gguf                            a model by name (one `model import --name` made)
  trainctl ckpt export runs/dpo-lora --to gguf --dry-run         what would be written (LoRA runs are merged first)
Beside the file: NAME.verification.json (llama.cpp's verdict), README.md (the model card) and an Ollama Modelfile.
""",
)
def export(
    target: _Target,
    to: Annotated[str, typer.Option("--to", help="the format: gguf (llama.cpp, Ollama, LM Studio)")],
    dtype: Annotated[str, typer.Option("--dtype", help="f32, f16, bf16 or q8_0 (8-bit)")] = "f16",
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="a .gguf file, or a folder (default: beside the step)")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="replace an existing file")] = False,
    verify: Annotated[
        bool, typer.Option("--verify/--no-verify", help="check the file with llama.cpp (xllamacpp) before keeping it")
    ] = True,
    dry_run: DryRun = False,
) -> None:
    """Export a checkpoint as a GGUF file for llama.cpp, Ollama and LM Studio: merged first where needed (as `ckpt
    merge`), written to a staging file, checked by llama.cpp itself (tokenizer, chat template, greedy answers against
    trainctl's) and only then renamed into place, with a model card and an Ollama Modelfile beside it."""
    from trainctl.ckpt.export import export as run_export
    from trainctl.ckpt.export import plan_export
    from trainctl.models.memory import count

    plan = plan_export(_model_folder(target), to, dtype, out, force, verify)
    c = plan.checkpoint
    step = f", step {c.step}" if c.step is not None else ""
    typer.echo(
        f"Exporting {c.path} ({c.layout}{step}) to GGUF {plan.dtype}: {plan.arch.hf} as {plan.arch.name}", err=True
    )
    typer.echo(f"  pre-tokenizer {plan.pre}, {plan.pre_how}", err=True)
    for note in plan.notes:
        typer.echo(f"  {note}", err=True)
    if plan.unverified and plan.unverified != "--no-verify":
        typer.echo(f"  not verified: {plan.unverified}", err=True)
    summary = f"{count(plan.params)} parameters, about {_size(plan.bytes)} as {plan.dtype}"
    if dry_run:
        check = "verified by llama.cpp" if plan.unverified is None else f"not verified ({plan.unverified})"
        typer.echo(f"Would write {plan.out}: {summary}, {check}")
        return
    with byte_progress("writing") as progress:
        if progress:
            progress(0, total=plan.bytes)
        done = run_export(plan, progress=progress, status=lambda s: typer.echo(f"  {s}", err=True))
    w = done.written
    types = ", ".join(f"{n} {t}" for t, n in sorted(w.types.items(), key=lambda kv: -kv[1]))
    typer.echo(f"Wrote {done.path}: {_size(w.bytes)}, {w.tensors} tensors ({types}) in {done.seconds:.1f} s")
    if done.verdict is not None:
        typer.echo(f"Verified by llama.cpp ({done.verdict.verifier}, {done.verdict.seconds:.1f} s):")
        for line in done.verdict.lines():
            typer.echo(f"  {line}")
    else:
        typer.echo(f"Not verified: {plan.unverified}")
    if done.beside:
        typer.echo(f"Beside it: {', '.join(p.name for p in done.beside)}")
    for note in done.notes:
        typer.echo(f"  {note}", err=True)
    ollama = f"cd {done.path.parent} && ollama create {plan.name.lower()} -f Modelfile"
    typer.echo(f"Run it: llama-server -m {done.path}   |   {ollama}")


@app.command(
    epilog="""\
\b
Examples:
  trainctl ckpt best runs/quickstart --metric train/loss       lowest train/loss (losses are minimised)
  trainctl ckpt best runs/grpo --metric critic/score/mean      highest mean reward (others are maximised)
  trainctl ckpt best out/dpo --metric eval_loss --mode min
""",
)
def best(
    target: _Target,
    metric: Annotated[str, typer.Option("--metric", "-m", help="a metric logged at checkpoint steps")],
    mode: Annotated[str | None, typer.Option("--mode", help="min or max (default: min for losses, else max)")] = None,
) -> None:
    """The checkpoint with the best value of a logged metric; prints its path (for scripts) on stdout."""
    from trainctl.ckpt.layout import list_checkpoints
    from trainctl.ckpt.select import best as pick

    ckpt, value, used = pick(list_checkpoints(target), metric, mode)
    say_passed_over(ckpt)
    typer.echo(f"best {metric} ({used}) = {value:.6g} at step {ckpt.step}", err=True)
    typer.echo(str(ckpt.path))


@app.command(
    epilog="""\
\b
Examples:
  trainctl ckpt prune runs/grpo --keep-last 2                              shows what would go
  trainctl ckpt prune runs/grpo --keep-last 2 --keep-best critic/score/mean --yes   deletes
The latest checkpoint and the best one are never deleted.
""",
)
def prune(
    target: _Target,
    keep_last: Annotated[int, typer.Option("--keep-last", help="keep the newest N checkpoints")],
    keep_best: Annotated[str | None, typer.Option("--keep-best", help="also keep the best by this metric")] = None,
    mode: Annotated[str | None, typer.Option("--mode", help="min or max for --keep-best")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="delete (without it, only show)")] = False,
) -> None:
    """Delete old checkpoints, keeping the newest N, the latest and the best. Shows the plan unless --yes."""
    from trainctl.ckpt.select import apply_prune, plan_prune

    plan = plan_prune(target, keep_last, keep_best, mode)
    for c, why in plan.keep:
        typer.echo(f"keep    {c.path}  ({why})")
    for c in plan.delete:
        typer.echo(f"{'delete' if yes else 'would delete'}  {c.path}  ({_size(c.size)})")
    if not plan.delete:
        typer.echo("Nothing to delete.")
        return
    if not yes:
        typer.echo(f"Would free {_size(plan.freed)}. Run again with --yes to delete.", err=True)
        return
    apply_prune(plan)
    typer.echo(f"Deleted {len(plan.delete)} checkpoint(s), freed {_size(plan.freed)}.")
