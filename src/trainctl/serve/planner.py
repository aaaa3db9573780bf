"""`python -m trainctl.serve.planner`: a job's fields -> the `trainctl train` words, and the plan `--dry-run` prints.

The server runs this in a process of its own (it composes with Hydra and imports verl or TRL for their own
validation: seconds and hundreds of MB the server itself does not hold), kept between plans (`--serve`: a request per
line; trainctl.serve.jobs.Planner) and let go when unused. It reads a JSON object per request:
    {"fields": {name, model_path, algorithm, learning_rate, ...}, "recipe": ..., "overrides": [...], "root": DIR}
and prints one JSON object: {"args", "name", "run_dir", "family", "plan", "problems", "warnings", "notes"}.

The fields of the job API, on trainctl's groups and keys:
    name            run.name                  train_data_path  data.train_files
    model_path      model=OPTION, model=RUN (a run or its checkpoint), or model.path=FOLDER
    eval_data_path  data.val_files
    algorithm       algorithm=NAME            num_epochs       run.epochs
    num_gpus        hardware.gpus_per_node (8 per node beyond 8: hardware.nnodes)
    context_length  model.context_length      description      kept beside the run (job.json), not a key
    learning_rate   sft: optim.lr · ppo family: actor_rollout_ref.actor.optim.lr · TRL (dpo, kto, ...): learning_rate
    batch_size      sft, ppo family: data.train_batch_size (sequences / prompts per step) ·
                    TRL: gradient_accumulation_steps = batch_size / (micro batch x devices)
    rollout_n       ppo family: actor_rollout_ref.rollout.n
    kl_coef         ppo family: actor_rollout_ref.actor.kl_loss_coef where the algorithm uses a KL loss, else
                    algorithm.kl_ctrl.kl_coef where it puts KL in the reward, else the KL loss turned on ·
                    TRL: beta, where the trainer has one (dpo, kto, orpo, cpo)
(FAMILY_FIELDS, VERL_KEYS below: where a new family's keys go.)
The recipe comes first, then the fields, then `overrides` (which win).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from trainctl.errors import ConfigProblems, Problem, TrainctlError

PER_NODE = 8
# The job fields whose key depends on the algorithm's family (its trainer). verl's families are here, field by field
# (kl_coef in the PPO family depends on the algorithm: _ppo_kl); every TRL trainer (a row of
# trainctl.facts.trl.TRAINERS) takes TrainingArguments' learning_rate, batch_size as gradient accumulation, and
# kl_coef as its beta where it has one. A new TRL trainer needs nothing here; a new verl family, a row.
FAMILY_FIELDS = ("learning_rate", "batch_size", "rollout_n", "kl_coef")
VERL_KEYS = {
    "sft": {"learning_rate": "optim.lr", "batch_size": "data.train_batch_size"},
    "ppo": {"learning_rate": "actor_rollout_ref.actor.optim.lr", "batch_size": "data.train_batch_size",
            "rollout_n": "actor_rollout_ref.rollout.n"},
}  # fmt: skip
# why a field does not apply where it does not
WHY_NOT = {
    "learning_rate": "it trains nothing",
    "batch_size": "it has no batch",
    "rollout_n": "it samples nothing (rollout_n applies to RL, the PPO family)",
    "kl_coef": "it has no reference model or KL term",
}
# the start of the line that carries an answer (--serve)
ANSWER = "\x1etrainctl-plan "


def problem(p: Problem) -> dict:
    return {"message": p.message, "key": p.key, "details": p.details, "hint": p.hint, "severity": p.severity}


def error_problem(e: TrainctlError) -> list[dict]:
    if isinstance(e, ConfigProblems):
        return [problem(p) for p in e.problems]
    return [{"message": e.message, "key": None, "details": e.details, "hint": e.hint, "severity": "error"}]


def _value(comp_cfg, key: str, default=None):
    from omegaconf import OmegaConf

    try:
        v = OmegaConf.select(comp_cfg, key, default=default, throw_on_missing=False)
    except Exception:
        return default
    return default if v is None else v


def _load(words: list[str], search):
    """The composed trainctl config of these words (model=RUN read as the model it means, as the plan reads it)."""
    from trainctl.ckpt.lineage import from_runs
    from trainctl.config.load import load

    return load(from_runs(words)[0], search)


def field_words(fields: dict[str, Any], base: list[str], search) -> tuple[list[str], list[str], list[dict]]:
    """The overrides the job's fields stand for (after `base`: the recipe and the algorithm), notes saying what
    was chosen, and problems for fields that do not apply."""
    words: list[str] = []
    notes: list[str] = []
    problems: list[dict] = []

    def bad(field: str, message: str, hint: str | None = None) -> None:
        problems.append({"message": message, "key": field, "details": [], "hint": hint, "severity": "error"})

    if fields.get("name"):
        words.append(f"run.name={_text(fields['name'])}")
    model = fields.get("model_path")
    if model:
        options = list(search.options("model"))
        folder = Path(model).expanduser()
        if model in options:
            words.append(f"model={model}")
        elif folder.is_dir() and any((p / "run.json").is_file() for p in [folder, *folder.parents][:3]):
            # a run, or one of its checkpoints: trained from (merged once, recorded as the new run's lineage)
            words.append(f"model={_text(str(folder.resolve()))}")
            notes.append(f"model_path {model} is a run's checkpoint: the new run starts from it (model=RUN)")
        elif folder.is_dir():
            words.append(f"model.path={_text(str(folder.resolve()))}")
            notes.append(f"model_path {model} is a folder: model.path={folder.resolve()}")
        else:
            bad(
                "model_path",
                f"model_path {model!r} is neither a model option nor a folder here.",
                f"a model option ({', '.join(options[:6])}, ...: trainctl model ls) or a Hugging Face folder",
            )
    for field, key in (("train_data_path", "data.train_files"), ("eval_data_path", "data.val_files")):
        if fields.get(field):
            p = Path(fields[field]).expanduser()
            words.append(f"{key}={_text(str(p.resolve() if p.exists() else p))}")
    if fields.get("num_epochs") is not None:
        words.append(f"run.epochs={fields['num_epochs']}")
    if fields.get("context_length") is not None:
        words.append(f"model.context_length={fields['context_length']}")
    gpus = fields.get("num_gpus")
    if gpus is not None:
        if gpus <= PER_NODE:
            words.append(f"hardware.gpus_per_node={gpus}")
        elif gpus % PER_NODE == 0:
            words += [f"hardware.nnodes={gpus // PER_NODE}", f"hardware.gpus_per_node={PER_NODE}"]
        else:
            bad(
                "num_gpus",
                f"num_gpus {gpus}: beyond {PER_NODE} GPUs a job takes whole nodes of {PER_NODE}.",
                f"num_gpus={gpus // PER_NODE * PER_NODE or PER_NODE}, or hardware.nnodes and "
                "hardware.gpus_per_node in overrides",
            )
    needs_family = [f for f in FAMILY_FIELDS if fields.get(f) is not None]
    if not needs_family:
        return words, notes, problems
    loaded = _load([*base, *words], search)
    family, algorithm = loaded.cfg.family, loaded.cfg.algorithm.name
    comp = loaded.comp.cfg
    for name in needs_family:
        value = fields[name]
        if family in VERL_KEYS:
            key = VERL_KEYS[family].get(name)
            if name == "kl_coef" and family == "ppo":
                words += _ppo_kl(comp, value, algorithm, notes)
            elif key is None:
                bad(name, f"{name} does not apply to algorithm {algorithm} ({family}): {WHY_NOT[name]}.",
                    f"leave {name} out, or choose an algorithm it applies to")  # fmt: skip
            else:
                words.append(f"{key}={value}")
            continue
        trainer = _trl_trainer(family)
        if trainer is None:
            bad(
                name,
                f"{name}: the job API does not know where algorithm {algorithm} ({family}) takes it.",
                f"leave {name} out and set the key in overrides (trainctl config show --backend algorithm={algorithm})",
            )
        elif name == "learning_rate":
            words.append(f"learning_rate={value}")
        elif name == "batch_size":
            hw = loaded.cfg.hardware
            per_step = hw.micro_batch_size_per_gpu * hw.gpus_per_node * hw.nnodes
            if value % per_step:
                bad(
                    "batch_size",
                    f"batch_size {value} is not a multiple of the micro batch x devices ({per_step}: "
                    f"hardware.micro_batch_size_per_gpu={hw.micro_batch_size_per_gpu} x "
                    f"{hw.gpus_per_node * hw.nnodes}); TRL's batch is micro batch x devices x accumulation steps.",
                    f"batch_size={max(per_step, value // per_step * per_step)}",
                )
            else:
                words.append(f"gradient_accumulation_steps={value // per_step}")
                steps = value // per_step
                notes.append(f"batch_size {value} = {per_step} per pass x gradient_accumulation_steps {steps}")
        elif name == "kl_coef" and trainer.beta:
            words.append(f"beta={value}")
            notes.append(f"kl_coef {value} is {family.upper()}'s beta ({trainer.beta})")
        else:
            bad(name, f"{name} does not apply to algorithm {algorithm} ({family}): {WHY_NOT[name]}.",
                f"leave {name} out, or choose an algorithm it applies to")  # fmt: skip
    return words, notes, problems


def _text(value: str) -> str:
    """A string as an override's value: quoted where Hydra would read something else (a number, a bool, null, a
    sweep: the name "0", a path with a comma)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        if OverridesParser.create().parse_override(f"k={value}").value() == value:
            return value
    except Exception:  # not an override value as written: quoted, it is one
        pass
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _trl_trainer(family: str):
    from trainctl.facts.trl import TRAINERS

    return TRAINERS.get(family)


def _ppo_kl(comp, kl: float, algorithm: str, notes: list[str]) -> list[str]:
    """kl_coef in the PPO family: the KL loss's weight where the algorithm has one, else the KL penalty in the
    reward where it has that, else the KL loss turned on."""
    if _value(comp, "verl.actor_rollout_ref.actor.use_kl_loss", False):
        return [f"actor_rollout_ref.actor.kl_loss_coef={kl}"]
    if _value(comp, "verl.algorithm.use_kl_in_reward", False):
        return [f"algorithm.kl_ctrl.kl_coef={kl}"]
    notes.append(f"algorithm {algorithm} uses no KL term: kl_coef turns the KL loss on")
    return ["actor_rollout_ref.actor.use_kl_loss=true", f"actor_rollout_ref.actor.kl_loss_coef={kl}"]


def plan_job(request: dict) -> dict:
    from trainctl.cli.render import plan_text
    from trainctl.config.search import SearchPath
    from trainctl.plan import make_plan

    search = SearchPath.default()
    fields = dict(request.get("fields") or {})
    base = [f"recipe={request['recipe']}"] if request.get("recipe") else []
    if fields.get("algorithm"):
        base.append(f"algorithm={fields['algorithm']}")
    out: dict[str, Any] = {
        "args": [],
        "name": None,
        "run_dir": None,
        "family": None,
        "plan": "",
        "problems": [],
        "warnings": [],
        "notes": [],
    }
    try:
        words, notes, problems = field_words(fields, base, search)
    except TrainctlError as e:
        out["problems"] = error_problem(e)
        return out
    args = [*base, *words, *[str(o) for o in request.get("overrides") or []]]
    out["notes"], out["problems"] = notes, problems
    root = Path(request["root"]).resolve() if request.get("root") else None
    try:
        loaded = _load(args, search)
        out["name"], out["family"] = loaded.cfg.run.name, loaded.cfg.family
        run_dir = Path(loaded.cfg.run.dir).expanduser().resolve()
        if root and root not in run_dir.parents and not any(a.startswith("run.dir=") for a in args):
            # the run folder goes under the server's runs folder, as a user would ask for it
            args.append(f"run.dir={_text(str(root / loaded.cfg.run.name))}")
            run_dir = root / loaded.cfg.run.name
        out["args"], out["run_dir"] = args, str(run_dir)
        if problems:  # the fields first: the plan of a job they do not describe would mislead
            return out
        plan = make_plan(args, search, launching=False)
    except TrainctlError as e:
        out["args"] = out["args"] or args
        if isinstance(e, ConfigProblems):
            out["warnings"] = [problem(w) for w in e.warnings]
        out["problems"] += error_problem(e)
        return out
    out["warnings"] = [problem(w) for w in plan.warnings]
    out["plan"] = plan_text(plan)
    out["run_dir"] = str(plan.run_dir)
    return out


def answer(request: dict) -> str:
    """plan_job's answer as one line of JSON, with no secret of this environment in it."""
    try:
        result = plan_job(request)
    except Exception as e:  # a bug, said as a problem rather than a traceback the server must parse
        result = {
            "args": [],
            "plan": "",
            "warnings": [],
            "notes": [],
            "problems": [
                {
                    "message": f"unexpected {type(e).__name__}: {e}",
                    "key": None,
                    "details": [],
                    "severity": "error",
                    "hint": "TRAINCTL_DEBUG=1 trainctl train ARGS --dry-run shows the traceback",
                }
            ],
        }
    from trainctl.secrets import Redactor

    return Redactor().text(json.dumps(result))


def main() -> None:
    """--serve: a request per line of stdin, its answer on a line of stdout that starts with ANSWER (what the
    libraries print goes elsewhere or is skipped), until stdin closes. Without it: one request, one answer."""
    if "--serve" in sys.argv[1:]:
        for line in sys.stdin:
            if line.strip():
                sys.stdout.write(ANSWER + answer(json.loads(line)) + "\n")
                sys.stdout.flush()
        return
    sys.stdout.write(answer(json.loads(sys.stdin.read() or "{}")))


if __name__ == "__main__":
    main()
