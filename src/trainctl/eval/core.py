"""`trainctl eval`: score a model, a run or checkpoints on a data set's test split with the reward training uses.

prepare() finds everything and checks it before any model is loaded (the model or checkpoint exists, the data has a
test split in RL form, every data_source has a scorer, the sampling settings fit: n >= k); evaluate() then, for each
target, merges it if needed, builds the prompts as training's rollout does (the `prompt` messages of verl's RL
parquet, which carry the data's instruction, through the tokenizer's chat template with verl's token builder),
generates, scores each response with verl's reward manager (trainctl.eval.scoring) and summarises.

The translation from trainctl's config to verl's is the training command's own (trainctl.plan.resolve), so the reward
function, its arguments, the token budgets and validation's sampling settings are those training would use.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from trainctl.errors import ConfigProblems, Problem
from trainctl.eval import agent
from trainctl.eval import settings as eval_settings
from trainctl.eval.passk import mean_pass_at_k
from trainctl.eval.targets import Resolved, Target, merged_folder
from trainctl.eval.targets import resolve as resolve_model
from trainctl.paths import atomic_write_text

METRICS_FILE = "metrics.jsonl"


@dataclass
class Prepared:
    resolved: Resolved
    plan: Any  # trainctl.plan.Plan: trainctl's config and the verl config it translates to
    sampling: eval_settings.Sampling
    data_name: str
    val_file: Path
    rows: list[dict]
    out_dir: Path
    engine: str
    notes: list[str] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    tools: Any = None  # trainctl.eval.agent.AgentTools: the test split runs through verl's tool agent loop

    @property
    def targets(self) -> list[Target]:
        return self.resolved.targets

    @property
    def prefix(self) -> str:
        return f"eval/{self.data_name}"

    @property
    def verl_cfg(self) -> DictConfig:
        """The verl config as the trainer reads it (resolved, as the run folder's verl_ppo.yaml holds it)."""
        return OmegaConf.create(OmegaConf.to_container(self.plan.backend_cfg, resolve=True))

    def value(self, path: str, default: Any = None) -> Any:
        return self.plan.value(path, default)


@dataclass
class Result:
    target: Target
    metrics: dict[str, float]
    samples_file: Path
    seconds: float
    tokens: int  # response tokens generated
    prompts: int
    best: bool = False

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


# -- before anything is loaded ------------------------------------------------------------------------------------


def prepare(
    model: str,
    words: list[str],
    *,
    each_checkpoint: bool = False,
    out: Path | None = None,
    limit: int | None = None,
    base: bool = True,
    search=None,
) -> Prepared:
    """Resolve MODEL and the config, and check everything eval needs. Raises ConfigProblems (every problem at once)
    or TrainctlError; nothing is loaded or generated here."""
    from trainctl.backends.rewards import kind_of
    from trainctl.config.search import SearchPath
    from trainctl.plan import resolve

    search = search or SearchPath.default()
    given, overrides = eval_settings.split_words(words)
    resolved = resolve_model(model, each_checkpoint, search.options("model"))
    notes: list[str] = []
    # scoring needs the RL side of the config (the reward, the prompts with ground truths): a PPO-family algorithm
    # unless the run or the command line chose one; an SFT or DPO run's data is scored in its RL form (of an SFT or
    # DPO run, only the model and data carry over: trainctl.eval.targets)
    args = ["algorithm=grpo", *resolved.args, *overrides]
    plan = resolve(args, search)
    trained = resolved.family if resolved.family not in (None, "ppo") else plan.cfg.family
    if trained != "ppo":
        notes.append(
            f"{trained.upper()} runs train on fixed targets; scoring its data's RL form (test prompts with ground "
            "truths) with the reward group"
        )
    if plan.cfg.family != "ppo":
        args.append("algorithm=grpo")
        plan = resolve(args, search)
    out_dir = (
        Path(out).expanduser()
        if out
        else (resolved.run_dir / "eval" if resolved.run_dir else Path("eval") / _slug(resolved.name))
    ).resolve()
    if agent.uses_tools(plan):
        # the tool servers' files (the calculator's log) and the call log go to eval's folder, not the run's
        plan = resolve([*args, f"run.dir={out_dir}"], search)
    cfg = plan.cfg
    # eval scores in this process, with the reward manager verl's reward workers would build
    problems: list[Problem] = kind_of(cfg).eval_problems(cfg)
    if agent.uses_tools(plan) and (refused := agent.refuse_engine(cfg.hardware.rollout_engine)):
        problems.append(refused)

    # the model: a model option must be downloaded; a run's base model is its first row when it is here
    model_dir = Path(cfg.model.path).expanduser()
    if resolved.kind == "name":
        if not (model_dir / "config.json").is_file():
            pull = f"trainctl model init {model}" if model == "tiny" else f"trainctl model pull {model}"
            problems.append(
                Problem(f"model={model} is not downloaded: {model_dir} has no config.json.", key="model", hint=pull)
            )
        resolved.targets[0].folder = model_dir
    elif resolved.kind == "run" and each_checkpoint and base and (model_dir / "config.json").is_file():
        resolved.targets.insert(0, Target("base", 0, None, model_dir))

    # the data: a test split in RL form whose every data_source some reward scores
    data_name = cfg.data.name
    val = cfg.data.val_files
    val_file = Path(val).expanduser() if val else Path()
    if not val:
        problems.append(
            Problem(
                f"data={data_name} has no test split (data.val_files is not set).",
                key="data.val_files",
                hint="data.val_files=path/to/test.parquet",
            )
        )
    elif not val_file.is_file():
        problems.append(
            Problem(
                f"data={data_name}: the test split {val_file} does not exist.",
                key="data.val_files",
                hint=f"trainctl data prep {data_name}   (or point at a test file: data.val_files=PATH)",
            )
        )
    else:
        problems += _data_problems(plan, val_file)

    defaults = {
        "n": plan.value("actor_rollout_ref.rollout.val_kwargs.n", 1),
        "temperature": plan.value("actor_rollout_ref.rollout.val_kwargs.temperature", 0.0),
        "top_p": plan.value("actor_rollout_ref.rollout.val_kwargs.top_p", 1.0),
        "top_k": plan.value("actor_rollout_ref.rollout.val_kwargs.top_k", -1),
        "max_tokens": plan.value("actor_rollout_ref.rollout.response_length") or cfg.data.max_response_length,
        "seed": cfg.run.seed,
    }
    sampling, found = eval_settings.sampling(given, defaults)
    problems += found
    if limit is not None and limit < 1:
        problems.append(Problem(f"--limit {limit}: at least one prompt.", key="--limit", hint="--limit 16"))
    errors = [p for p in problems if p.is_error]
    warnings = [p for p in problems if not p.is_error] + plan.warnings
    if errors:
        raise ConfigProblems(errors, warnings)

    agent_tools = None
    if agent.uses_tools(plan):
        agent_tools, found = agent.prepare_tools(plan, out_dir, resolved.run_dir)
        warnings += found
        notes.append(
            f"each prompt runs verl's tool agent loop with {', '.join(agent_tools.names)} "
            f"(up to {cfg.tools.max_assistant_turns} assistant turns); calls logged in {agent_tools.calls_dir}"
        )
    rows = _read_rows(val_file, limit)
    return Prepared(
        resolved,
        plan,
        sampling,
        data_name,
        val_file,
        rows,
        out_dir,
        cfg.hardware.rollout_engine,
        notes,
        warnings,
        agent_tools,
    )


def _data_problems(plan, val_file: Path) -> list[Problem]:
    from trainctl.backends.rewards import kind_of
    from trainctl.checks.data import reward_fn
    from trainctl.data.check import quick_check

    path, _, _ = reward_fn(plan.subject)
    kind = kind_of(plan.cfg)
    scored = bool(path) or kind.scores_every_row
    found = quick_check(val_file, "rl", custom_reward=scored, ground_truth=kind.needs_ground_truth)
    for p in found:  # the data checks speak of training; here the test split is scored, now
        if p.key == "data.train_files":
            p.key = "data.val_files"
        p.message = p.message.replace(
            'verl would fail with "Reward function is not implemented" once rollouts start.', "nothing scores them."
        )
    return found


def _read_rows(path: Path, limit: int | None) -> list[dict]:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    if limit is not None:
        table = table.slice(0, limit)
    return table.to_pylist()


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "model"


# -- generating and scoring ----------------------------------------------------------------------------------------


def prompt_ids(p: Prepared, tokenizer, folder: Path) -> tuple[list[list[int]], list[int], list[int]]:
    """(prompt token ids, max tokens, row indices kept) as training's rollout builds them: the `prompt` messages
    through verl's continuous-token builder (the tokenizer's chat template, data.apply_chat_template_kwargs),
    prompts over data.max_prompt_length dropped (data.filter_overlong_prompts) or left-truncated (the agent loop)."""
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    model_type = json.loads((folder / "config.json").read_text()).get("model_type")
    kwargs = p.value("data.apply_chat_template_kwargs") or {}
    builder = create_continuous_token_builder(
        tokenizer, hf_model_type=model_type, chat_template_kwargs=dict(kwargs) if kwargs else None
    )
    prompt_length = int(p.value("actor_rollout_ref.rollout.prompt_length") or p.plan.cfg.data.max_prompt_length)
    response_length = int(p.value("actor_rollout_ref.rollout.response_length") or p.sampling.max_tokens)
    drop_long = bool(p.value("data.filter_overlong_prompts"))
    from trainctl.eval.generation import max_tokens_for

    ids, limits, kept = [], [], []
    for i, row in enumerate(p.rows):
        tokens = builder.build_initial_tokens([dict(m) for m in row["prompt"]])
        if len(tokens) > prompt_length:
            if drop_long:
                continue
            tokens = tokens[-prompt_length:]
        ids.append(tokens)
        limits.append(max_tokens_for(len(tokens), p.sampling.max_tokens, prompt_length, response_length))
        kept.append(i)
    return ids, limits, kept


def evaluate(p: Prepared, target: Target, progress: Callable[[int, int], None] | None = None) -> Result:
    """Generate and score one target; write its samples and metrics; return its summary."""
    from transformers import AutoTokenizer

    from trainctl.eval.generation import Generated, generate_cpu, generate_vllm
    from trainctl.eval.scoring import Scorer

    folder = merged_folder(target)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    trajectories = None
    if p.tools is not None:
        kept = list(range(len(p.rows)))
        trajectories, seconds = agent.generate(
            p.verl_cfg, p.tools, folder, tokenizer, p.rows, p.sampling, progress=progress, engine=p.engine,
            device=p.plan.cfg.hardware.device,
        )  # fmt: skip
        prompts = [ts[0].prompt_ids for ts in trajectories]
        generated = [[Generated(t.response_ids, t.truncated) for t in ts] for ts in trajectories]
    elif p.engine == "hf":
        prompts, limits, kept = prompt_ids(p, tokenizer, folder)
        generated, seconds = generate_cpu(
            folder,
            prompts,
            limits,
            p.sampling,
            attn_implementation=p.plan.cfg.hardware.attn_implementation or "sdpa",
            max_batch_size=int(p.value("actor_rollout_ref.rollout.max_num_seqs") or 256),
            max_prefill_tokens=int(p.value("actor_rollout_ref.rollout.max_num_batched_tokens") or 8192),
            progress=progress,
        )
    else:
        prompts, limits, kept = prompt_ids(p, tokenizer, folder)
        generated, seconds = generate_vllm(
            folder,
            prompts,
            limits,
            p.sampling,
            device=p.plan.cfg.hardware.device,
            value=p.value,
            max_model_len=max(len(x) for x in prompts) + max(limits) if prompts else None,
            progress=progress,
        )

    samples = []
    for i, (prompt, row_index, outs) in enumerate(zip(prompts, kept, generated, strict=True)):
        row = p.rows[row_index]
        for j, g in enumerate(outs):
            t = trajectories[i][j] if trajectories is not None else None
            samples.append(
                {
                    "row": row_index,
                    "sample": j,
                    "prompt_ids": t.prompt_ids if t is not None else prompt,
                    "num_turns": t.num_turns if t is not None else 2,
                    "response_ids": g.token_ids,
                    "truncated": g.truncated,
                    "data_source": row["data_source"],
                    "reward_model": row["reward_model"],
                    "extra_info": row.get("extra_info")
                    if t is None
                    else agent.with_turns(row.get("extra_info"), t.turns),
                    "raw_prompt": row["prompt"],
                    "uid": f"{row_index}",
                }
            )
    scored = Scorer(p.verl_cfg, tokenizer).score(samples)
    answer_format = re.compile(p.plan.cfg.data.answer_format) if p.plan.cfg.data.answer_format else None

    records = []
    for s, sc in zip(samples, scored, strict=True):
        records.append(
            {
                "row": s["row"],
                "sample": s["sample"],
                "data_source": s["data_source"],
                "prompt": s["raw_prompt"],
                # the response as the reward read it: decoded without special tokens (verl's naive manager)
                "response": tokenizer.decode(s["response_ids"], skip_special_tokens=True),
                "ground_truth": (s["reward_model"] or {}).get("ground_truth"),
                "reward": sc.reward,
                "acc": sc.acc,
                "reward_extra": {k: v for k, v in sc.extra.items() if _plain(v)},
                "response_tokens": len(s["response_ids"]),
                "truncated": s["truncated"],
            }
        )
        if answer_format is not None:  # the answer's form, right or wrong (data.answer_format)
            records[-1]["format"] = answer_format.search(records[-1]["response"]) is not None
    if trajectories is not None:  # the turns, as a run's rollouts/ keep them, and the calls the tools logged
        flat = [t for ts in trajectories for t in ts]
        for r, t in zip(records, flat, strict=True):
            r["num_turns"] = t.num_turns
            r["turns"] = t.turns
            r["tool_calls"] = [agent.call_view(c) for c in t.calls]
            r["request_id"] = t.request_id
    metrics = summarize(p.prefix, records, p.sampling)
    if trajectories is not None:
        metrics |= agent.summary(p.prefix, records)
    samples_file = p.out_dir / "samples" / p.data_name / f"{_slug(target.label.replace(' ', '-'))}.jsonl"
    atomic_write_text(samples_file, "".join(json.dumps(r, default=str) + "\n" for r in records))
    if target.step is not None:
        write_metrics(p.out_dir, target.step, metrics)
    tokens = sum(r["response_tokens"] for r in records)
    return Result(target, metrics, samples_file, seconds, tokens, len(prompts))


def _plain(v) -> bool:
    return v is None or isinstance(v, bool | int | float | str)


def summarize(prefix: str, records: list[dict], s: eval_settings.Sampling) -> dict[str, float]:
    """eval/<data>/... over every sample, and eval/<data>/<data_source>/... when the file mixes sources."""
    by_source: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_source[str(r["data_source"])].append(r)
    metrics = _summary(prefix, records, s)
    if len(by_source) > 1:
        for source, rs in sorted(by_source.items()):
            metrics |= _summary(f"{prefix}/{source}", rs, s)
    return metrics


def _summary(prefix: str, records: list[dict], s: eval_settings.Sampling) -> dict[str, float]:
    n = len(records)
    if not n:
        return {}
    out = {
        f"{prefix}/acc": sum(r["acc"] for r in records) / n,
        f"{prefix}/reward": sum(r["reward"] for r in records) / n,
        f"{prefix}/response_length": sum(r["response_tokens"] for r in records) / n,
        f"{prefix}/truncated": sum(bool(r["truncated"]) for r in records) / n,
    }
    if "format" in records[0]:
        out[f"{prefix}/format"] = sum(r["format"] for r in records) / n
    if s.n > 1:
        per_row: dict[int, list[dict]] = defaultdict(list)
        for r in records:
            per_row[r["row"]].append(r)
        counts = [(len(rs), sum(r["acc"] >= s.threshold for r in rs)) for rs in per_row.values()]
        for k in s.ks:
            value = mean_pass_at_k(counts, k)
            if not math.isnan(value):
                out[f"{prefix}/pass@{k}"] = value
    return out


def write_metrics(out_dir: Path, step: int, metrics: dict[str, float]) -> Path:
    """Merge this step's metrics into <out>/metrics.jsonl ({"step": N, "data": {...}} per line, the format of verl's
    file logger and trainctl's run metrics, which `ckpt ls -m` and `ckpt best --metric` read)."""
    from trainctl.metrics import read_jsonl

    path = out_dir / METRICS_FILE
    steps = read_jsonl(path) if path.is_file() else {}
    steps.setdefault(step, {}).update(metrics)
    text = "".join(json.dumps({"step": s, "data": steps[s]}) + "\n" for s in sorted(steps))
    atomic_write_text(path, text)
    return path


def mark_best(results: list[Result], metric: str) -> Result | None:
    """The best checkpoint by `metric`, chosen as `trainctl ckpt best` chooses (trainctl.ckpt.select); the base
    model's row takes no part (it is no checkpoint of the run)."""
    from trainctl.ckpt.select import default_mode

    scored = [r for r in results if r.target.checkpoint is not None and metric in r.metrics]
    if len(scored) < 2:
        return None
    pick = min if default_mode(metric) == "min" else max
    best = pick(scored, key=lambda r: r.metrics[metric])
    best.best = True
    return best
