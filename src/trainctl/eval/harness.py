"""`trainctl eval MODEL --tasks T1,T2`: standard benchmarks with EleutherAI's lm-evaluation-harness (lm-eval), as a
library, on what `trainctl eval` takes (a model option, a folder, a run: its latest checkpoint or every one, or one
checkpoint; shards and LoRA adapters merged, verified, into the cache as eval merges them).

The model is lm-eval's own: its Hugging Face model (`hf`) in this process, fp32 on a CPU (as eval and `model serve`
load it), or its vLLM model where the hardware's rollout engine is vLLM (GPUs). So the numbers are the ones
`lm_eval --model hf --model_args pretrained=FOLDER,dtype=float32 --device cpu` gets on the same folder (`command()`
writes that command down).

prepare() checks everything before a model is loaded: the tasks exist (in --include-path or lm-eval's own), and
each one's dataset loads, here and now; a dataset the machine cannot have (offline, or the Hub unreachable) is one
error naming it and how to provide it. Local tasks (a YAML with `dataset_path: json` and `data_files`) need nothing
from the network. The `datasets` library's cache is trainctl's (HF_DATASETS_CACHE, unless the user chose one, as a
run's trainer gets). evaluate() runs one target: the metrics go to <out>/metrics.jsonl at the target's step as
eval/<task>/<metric> (eval/<task>/<metric>/<filter> for a filter other than lm-eval's "none"), where `ckpt ls -m`,
`ckpt best --metric`, `runs show` and `trainctl serve`'s checkpoints page read eval results; lm-eval's own results
file and per-sample logs (results_<date>.json, samples_<task>_<date>.jsonl, written by its EvaluationTracker) go to
<out>/lm-eval/<target>/.

lm_eval and datasets are imported inside the functions that use them (lm_eval alone costs seconds).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainctl.errors import ConfigProblems, Problem, UsageError
from trainctl.eval import settings as eval_settings
from trainctl.eval.targets import Resolved, Target, merged_folder
from trainctl.eval.targets import resolve as resolve_model

LOG_DIR = "lm-eval"  # in the output folder: lm-eval's own files, one folder per target


@dataclass
class Prepared:
    resolved: Resolved
    plan: Any  # trainctl.plan.Plan: the model's path and the hardware come from it
    tasks: list[str]
    include_path: Path | None
    num_fewshot: int | None
    limit: int | None
    batch_size: int | str
    out_dir: Path
    engine: str  # the hardware's rollout engine: "hf" (lm-eval's hf model) or "vllm" (lm-eval's vllm model)
    device: str
    task_manager: Any = None  # lm_eval.tasks.TaskManager: the index the tasks were found in
    leaf_tasks: list[str] = field(default_factory=list)  # every task the names expand to (groups' members)
    warnings: list[Problem] = field(default_factory=list)

    @property
    def targets(self) -> list[Target]:
        return self.resolved.targets

    def lm(self, folder: Path) -> tuple[str, dict[str, Any]]:
        """lm-eval's model name and model_args for a folder: vLLM's with the engine settings `model serve` and eval
        give it (trainctl.inference.vllm: the rollout's on GPUs, the CPU build's on the CPU)."""
        if self.engine == "vllm":
            from trainctl.inference import vllm

            return "vllm", {"pretrained": str(folder), **vllm.engine_args(self.device, self.plan.value)}
        return "hf", {"pretrained": str(folder), "dtype": "float32" if self.device == "cpu" else "auto"}

    def command(self, folder: Path) -> str:
        """lm-eval's own command for the same numbers on this folder."""
        model, args = self.lm(folder)
        words = ["lm_eval", "--model", model, "--model_args", ",".join(f"{k}={v}" for k, v in args.items())]
        words += ["--tasks", ",".join(self.tasks)]
        if self.include_path:
            words += ["--include_path", str(self.include_path)]
        if self.num_fewshot is not None:
            words += ["--num_fewshot", str(self.num_fewshot)]
        if self.limit is not None:
            words += ["--limit", str(self.limit)]
        if model == "hf":
            words += ["--device", self.device]
        words += ["--batch_size", str(self.batch_size)]
        return " ".join(words)


@dataclass
class Result:
    target: Target
    metrics: dict[str, float]  # eval/<task>/<metric>[/<filter>]
    log_dir: Path  # lm-eval's results and samples files
    seconds: float
    folder: Path  # the model folder lm-eval loaded


# -- before anything is loaded --------------------------------------------------------------------------------------


def prepare(
    model: str,
    words: list[str],
    tasks: str,
    *,
    include_path: Path | None = None,
    num_fewshot: int | None = None,
    limit: int | None = None,
    batch_size: str | None = None,
    each_checkpoint: bool = False,
    out: Path | None = None,
    base: bool = True,
    search=None,
) -> Prepared:
    """Resolve MODEL, the config and the tasks, and load each task's dataset; raises ConfigProblems (every problem at
    once) or TrainctlError. No model is loaded here."""
    from trainctl.config.search import SearchPath
    from trainctl.plan import resolve

    search = search or SearchPath.default()
    given, overrides = eval_settings.split_words(words)
    if given:
        listed = " ".join(f"{k}={v}" for k, v in given.items())
        raise UsageError(
            f"{listed}: with --tasks, each task's own YAML says how it generates (lm-eval's generation_kwargs).",
            hint="drop them, or score the data's test split with the run's reward instead: trainctl eval MODEL "
            + listed,
        )
    names = [t.strip() for t in tasks.split(",") if t.strip()]
    if not names:
        raise UsageError(f"--tasks {tasks!r} names no task.", hint="--tasks arc_easy,hellaswag")
    resolved = resolve_model(model, each_checkpoint, search.options("model"))
    # the model's path and the hardware: the config training would use (the PPO family's, as `model serve` composes)
    plan = resolve(["algorithm=grpo", *resolved.args, *overrides], search)
    if plan.cfg.family != "ppo":
        plan = resolve(["algorithm=grpo", *resolved.args, *overrides, "algorithm=grpo"], search)
    cfg = plan.cfg
    problems: list[Problem] = []
    model_dir = Path(cfg.model.path).expanduser()
    if resolved.kind == "name":
        if not (model_dir / "config.json").is_file():
            fix = f"trainctl model init {model}" if model.startswith("tiny") else f"trainctl model pull {model}"
            problems.append(
                Problem(f"model={model} is not downloaded: {model_dir} has no config.json.", key="model", hint=fix)
            )
        resolved.targets[0].folder = model_dir
        if cfg.model.kind != "causal_lm":
            problems.append(
                Problem(
                    f"model={model} is a {cfg.model.kind} model (a score head): lm-eval's tasks need a causal LM.",
                    key="model",
                    hint=f"trainctl eval {model} (a reward model's held-out pairs), or --tasks on a policy",
                )
            )
    elif resolved.kind == "run" and each_checkpoint and base and (model_dir / "config.json").is_file():
        resolved.targets.insert(0, Target("base", 0, None, model_dir))
    if num_fewshot is not None and num_fewshot < 0:
        problems.append(
            Problem(f"--num-fewshot {num_fewshot}: 0 or more.", key="--num-fewshot", hint="--num-fewshot 5")
        )
    if limit is not None and limit < 1:
        problems.append(Problem(f"--limit {limit}: at least one example per task.", key="--limit", hint="--limit 16"))
    engine = cfg.hardware.rollout_engine
    # lm-eval's defaults: one request at a time for its hf model; vLLM schedules all of them itself
    batch_size = batch_size or ("auto" if engine == "vllm" else "1")
    size: int | str = batch_size
    if batch_size != "auto" and not (batch_size.isdigit() and int(batch_size) >= 1):
        problems.append(
            Problem(f"--batch-size {batch_size}: a number >= 1, or auto.", key="--batch-size", hint="--batch-size 8")
        )
    elif batch_size != "auto":
        size = int(batch_size)
    if include_path is not None:
        include_path = Path(include_path).expanduser().resolve()
        if not include_path.is_dir():
            problems.append(
                Problem(
                    f"--include-path {include_path} is not a folder.",
                    key="--include-path",
                    hint="a folder of task YAML files (lm-eval's --include_path)",
                )
            )
    out_dir = (
        Path(out).expanduser()
        if out
        else (resolved.run_dir / "eval" if resolved.run_dir else Path("eval") / _slug(resolved.name))
    ).resolve()
    p = Prepared(resolved, plan, names, include_path, num_fewshot, limit, size, out_dir, engine,
                 str(cfg.hardware.device or "cpu"), warnings=list(plan.warnings))  # fmt: skip
    if not problems:
        problems += _load_tasks(p)
    if problems:
        raise ConfigProblems(problems, p.warnings)
    return p


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "model"


@contextlib.contextmanager
def datasets_cache():
    """The `datasets` library's cache in trainctl's (as a run's trainer has it), unless the user chose one: local
    tasks' Arrow copies are written there, not to ~/.cache/huggingface."""
    from trainctl.paths import cache_dir

    if os.environ.get("HF_DATASETS_CACHE") or os.environ.get("HF_HOME"):
        yield
        return
    folder = str(cache_dir() / "hf-datasets")
    os.environ["HF_DATASETS_CACHE"] = folder
    import datasets.config

    saved = datasets.config.HF_DATASETS_CACHE  # read when `datasets` was imported, perhaps before
    datasets.config.HF_DATASETS_CACHE = Path(folder)
    try:
        yield
    finally:
        datasets.config.HF_DATASETS_CACHE = saved
        os.environ.pop("HF_DATASETS_CACHE", None)


@contextlib.contextmanager
def quiet_harness():
    """lm-eval's INFO and WARNING lines (a default it fills in for each metric, the seeds it sets) and the bars of
    loading weights and datasets off; lm-eval's own bars over the requests stay (the progress). Its run record asks
    `git describe` in the working directory, which prints git's complaint outside a repository: kept quiet."""
    import logging

    import lm_eval.evaluator
    from datasets.utils import logging as datasets_logging
    from transformers.utils import logging as hf_logging

    logger = logging.getLogger("lm_eval")
    level = logger.level
    logger.setLevel(logging.ERROR)
    bars = hf_logging.is_progress_bar_enabled(), datasets_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    datasets_logging.disable_progress_bar()
    describe = lm_eval.evaluator.get_git_commit_hash
    lm_eval.evaluator.get_git_commit_hash = _git_commit_hash
    try:
        yield
    finally:
        logger.setLevel(level)
        if bars[0]:
            hf_logging.enable_progress_bar()
        if bars[1]:
            datasets_logging.enable_progress_bar()
        lm_eval.evaluator.get_git_commit_hash = describe


def _git_commit_hash() -> str | None:
    import subprocess

    try:
        out = subprocess.run(["git", "describe", "--always"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _load_tasks(p: Prepared) -> list[Problem]:
    """Find every task and load its dataset now: what cannot be had is said before a model is loaded."""
    with datasets_cache(), quiet_harness():
        from lm_eval.tasks import TaskManager

        # lm-eval's own index (thousands of YAML files) costs seconds: only when a name is not in --include-path
        def found(name: str) -> bool:  # a name in the index, or a task's YAML file (lm-eval takes both)
            return name in manager.all_tasks or (Path(name).suffix in (".yaml", ".yml") and Path(name).is_file())

        manager = TaskManager(include_path=str(p.include_path) if p.include_path else None, include_defaults=False)
        if not all(found(n) for n in p.tasks):
            manager = TaskManager(include_path=str(p.include_path) if p.include_path else None)
        p.task_manager = manager
        problems = []
        unknown = [n for n in p.tasks if not found(n)]
        for name in unknown:
            import difflib

            close = difflib.get_close_matches(name, manager.all_tasks, n=3, cutoff=0.6)
            where = f"in {p.include_path} or " if p.include_path else ""
            problems.append(
                Problem(
                    f"--tasks {name}: no such task, group or tag {where}among lm-eval's {len(manager.all_tasks)}.",
                    key="--tasks",
                    details=[f"did you mean: {', '.join(close)}"] if close else [],
                    hint="lm_eval ls tasks lists lm-eval's own; a task of yours: a YAML in a folder given to "
                    "--include-path DIR",
                )
            )
        for name in [n for n in p.tasks if n not in unknown]:
            try:
                loaded = manager.load([name])
            except Exception as e:  # the dataset, a YAML, a process_docs function: each said with the task's name
                problems.append(_load_problem(name, manager, e))
                continue
            p.leaf_tasks += [t for t in loaded["tasks"] if t not in p.leaf_tasks]
    return problems


# datasets' words: "Couldn't reach 'org/name' on the Hub (...)", "Dataset 'org/name' doesn't exist on the Hub ..."
_DATASET = re.compile(r"(?:reach|Dataset) '([^']+)'")


def _load_problem(name: str, manager, error: Exception) -> Problem:
    entry = manager.task_index.get(name)
    cfg = getattr(entry, "cfg", None) or {}
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    hub = isinstance(error, ConnectionError) or type(error).__name__ in ("DatasetNotFoundError", "OfflineModeIsEnabled")
    if not hub:
        where = f" ({entry.yaml_path})" if getattr(entry, "yaml_path", None) else ""
        return Problem(
            f"--tasks {name}: lm-eval cannot load it{where}: {type(error).__name__}: {text}",
            key="--tasks",
            hint=f"check the task's YAML and its data files{where}",
        )
    found = _DATASET.search(text)  # a group's: the member task's dataset
    dataset = cfg.get("dataset_path") or (found.group(1) if found else "its dataset")
    subset = cfg.get("dataset_name") if cfg.get("dataset_path") == dataset else None
    offline = any(os.environ.get(v, "").strip() not in ("", "0") for v in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"))
    why = "this machine reads datasets offline (HF_DATASETS_OFFLINE or HF_HUB_OFFLINE is set)" if offline else (
        "the Hugging Face Hub cannot be reached from here")  # fmt: skip
    load = f"datasets.load_dataset({dataset!r}{f', {subset!r}' if subset else ''})"
    cache = os.environ.get("HF_DATASETS_CACHE") or "<trainctl's cache>/hf-datasets"
    return Problem(
        f"--tasks {name} needs the dataset {dataset}{f' ({subset})' if subset else ''}, which is not in the "
        f"datasets cache, and {why}.",
        key="--tasks",
        details=[f"datasets said: {text}", f"datasets cache read: {cache} (HF_DATASETS_CACHE)"],
        hint=f"fetch it once where the Hub is reachable, into that cache: HF_DATASETS_CACHE={cache} python -c "
        f'"import datasets; {load}" (then copy the folder here); or save a local copy (JSONL or parquet) and '
        "point a task YAML at it (dataset_path: json, dataset_kwargs: {data_files: {test: FILE}}) in a folder "
        "given to --include-path",
    )


# -- one target ----------------------------------------------------------------------------------------------------


def evaluate(p: Prepared, target: Target) -> Result:
    """lm-eval on one target: its metrics written at its step, lm-eval's results and samples beside them."""
    from lm_eval import simple_evaluate
    from lm_eval.loggers import EvaluationTracker

    folder = merged_folder(target)
    model, model_args = p.lm(folder)
    log_dir = p.out_dir / LOG_DIR / _slug(target.label.replace(" ", "-"))
    # a ".json" output path: lm-eval writes its files into that folder, not one named after the model's path
    tracker = EvaluationTracker(output_path=str(log_dir / "results.json"))
    if model == "vllm":  # its caches under trainctl's, the CPU build's settings on the CPU; its engine inherits them
        from trainctl.inference import vllm
        from trainctl.runtime.vllm_cpu import alias_cpu_build

        os.environ.update(vllm.environment(p.device, base={}, quiet=True))
        alias_cpu_build()  # lm-eval asks for the distribution `vllm`'s version: the CPU build is `vllm-cpu`
    start = time.perf_counter()
    with datasets_cache(), quiet_harness():
        results = simple_evaluate(
            model=model,
            model_args=model_args,
            tasks=p.tasks,
            num_fewshot=p.num_fewshot,
            batch_size=p.batch_size,
            device=p.device if model == "hf" else None,
            limit=p.limit,
            log_samples=True,
            evaluation_tracker=tracker,
            task_manager=p.task_manager,
        )
        samples = results.pop("samples")
        tracker.save_results_aggregated(results=results, samples=samples)
        for task in results["configs"]:
            tracker.save_results_samples(task_name=task, samples=samples[task])
    seconds = time.perf_counter() - start
    metrics = metric_names(results)
    if target.step is not None:
        from trainctl.eval.core import write_metrics

        write_metrics(p.out_dir, target.step, metrics)
    return Result(target, metrics, log_dir, seconds, folder)


def metric_names(results: dict) -> dict[str, float]:
    """lm-eval's results ({task: {"acc,none": 0.5, "acc_stderr,none": 0.1, "alias": ...}}, groups too) as trainctl's
    metric names: eval/<task>/<metric>, with /<filter> when the filter is not "none" (a generate task's
    "strict-match"); values that are no number (a stderr of "N/A") are left out."""
    out: dict[str, float] = {}
    for task, values in {**results.get("results", {}), **results.get("groups", {})}.items():
        for key, value in values.items():
            metric, comma, filter_name = key.partition(",")
            if not comma or isinstance(value, bool) or not isinstance(value, int | float):
                continue
            out[f"eval/{task}/{metric}" + ("" if filter_name == "none" else f"/{filter_name}")] = float(value)
    return out


def headline(metrics: dict[str, float]) -> list[str]:
    """The metrics a table shows: every one but the standard errors, in lm-eval's order."""
    return [k for k in metrics if not k.split("/")[2].endswith("_stderr")]


def best_of(results: list[Result], metric: str) -> Result | None:
    """The checkpoint `trainctl ckpt best --metric` would pick by this metric (the earliest of equals); the base
    model is no checkpoint of the run. None unless two checkpoints or more have it."""
    from trainctl.ckpt.select import default_mode

    scored = [r for r in results if r.target.checkpoint is not None and metric in r.metrics]
    if len(scored) < 2:
        return None
    pick = min if default_mode(metric) == "min" else max
    return pick(scored, key=lambda r: r.metrics[metric])
