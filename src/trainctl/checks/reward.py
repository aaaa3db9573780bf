"""The reward section, before anything starts: each kind's settings, the reward model (there, a classifier with one
label and its head in the weights, fitting where it runs), the judge (its model, key, template and, in the native
stage, one probe of its endpoint)."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import TYPE_CHECKING

from trainctl.config import reward as reward_config
from trainctl.errors import Problem

if TYPE_CHECKING:
    from trainctl.checks.base import Subject

# the kind each reward key serves (the rest serve every kind)
KEY_KIND = {"fn": "fn", "model": "model", "judge": "judge", "url": "judge", "key_env": "judge"}
# where a classification head's weights are, by the names transformers gives them
HEAD_NAMES = ("score.weight", "classifier.weight", "classifier.out_proj.weight", "v_head.weight", "value_head.weight")
PROBE_TIMEOUT_S = 15.0


def checks(s: Subject) -> list[Problem]:
    r = s.cfg.reward
    if s.cfg.family != "ppo":
        if r.kind != "rule":
            return [
                Problem(
                    f"reward={r.name} scores RL responses, but algorithm={s.cfg.algorithm.name} trains on fixed "
                    "targets.",
                    key="reward",
                    hint="drop reward=..., or choose a PPO-family algorithm (algorithm=grpo, ppo, ...)",
                )
            ]
        return []
    problems = [*_settings(s), *_policy(s), *_verl_keys(s), *_filter_groups(s)]
    if r.kind == "model" and r.model:
        problems += reward_model(s)
    if r.kind == "judge" and r.judge:
        problems += judge(s)
    return problems


def _settings(s: Subject) -> list[Problem]:
    r = s.cfg.reward
    problems = []
    for key, kind in KEY_KIND.items():
        value = getattr(r, key)
        if value is not None and kind != r.kind:
            problems.append(
                Problem(
                    f"reward.{key} is set ({value!r}), but reward={r.name} does not read it.",
                    key=f"reward.{key}",
                    hint=f"reward={kind} reward.{key}={value}"
                    if key == kind
                    else f"reward={kind}, or drop reward.{key}",
                )
            )
    required = {"fn": "path/to/reward.py:compute_score", "model": "NAME", "judge": "NAME"}
    if r.kind in required and not getattr(r, r.kind):
        example = {"model": "tiny-rm", "judge": "gpt-4.1-mini reward.url=https://api.openai.com/v1"}.get(r.kind)
        problems.append(
            Problem(
                f"reward={r.name} needs reward.{r.kind}.",
                key=f"reward.{r.kind}",
                hint=f"reward.{r.kind}={example or required[r.kind]}",
            )
        )
    return problems


def _policy(s: Subject) -> list[Problem]:
    m = s.cfg.model
    if m.kind != "reward":
        return []
    return [
        Problem(
            f"model={m.name} is a reward model (kind: reward): the policy must be a causal LM.",
            key="model",
            hint=f"choose the policy with model=..., and score with reward=model reward.model={m.name}",
        )
    ]


def _verl_keys(s: Subject) -> list[Problem]:
    """verl keys set by hand (an algorithm file, a recipe, the command line) that the reward kind also sets."""
    managed = reward_config.manager(s.cfg.reward.kind, s.cfg.hardware.rollout_engine)
    if managed is None:
        return []
    mapping = f"conf/mapping/{s.backend.replace('verl-', 'verl_')}.yaml"
    problems = []
    for path, value in s.built.leaves.items():
        if not path.startswith(("reward.reward_manager.", "reward.custom_reward_function.")):
            continue
        if s.built.origins.get(path) == mapping:
            continue
        origin = s.built.origins.get(path) or s.comp.origin(f"verl.{path}") or "the config"
        problems.append(
            Problem(
                f"{path} = {value!r} (set in {origin}) would replace trainctl's {s.cfg.reward.kind} reward manager.",
                key=path,
                details=["reward=model on the CPU and reward=judge score through a reward manager of trainctl's"],
                hint=f"drop {path}, or score with reward=rule / reward=fn",
            )
        )
    return problems


def _filter_groups(s: Subject) -> list[Problem]:
    """DAPO's dynamic sampling reads each group's metric while sampling (verl's replay buffer)."""
    r = s.cfg.reward
    if r.kind not in ("model", "judge") or not s.value("algorithm.filter_groups.enable"):
        return []
    metric = s.value("algorithm.filter_groups.metric")
    if reward_config.on_servers(r.kind, s.cfg.hardware.rollout_engine) and not s.value(
        "reward.reward_model.enable_resource_pool"
    ):
        return [
            Problem(
                "algorithm.filter_groups needs each group's reward while sampling; verl scores with a colocated "
                "reward model only after sampling.",
                key="algorithm.filter_groups.enable",
                hint="algorithm.filter_groups.enable=false, or give the reward model GPUs of its own: "
                "reward.reward_model.enable_resource_pool=true reward.reward_model.n_gpus_per_node=N "
                "reward.reward_model.nnodes=1",
            )
        ]
    if metric != "reward":
        return [
            Problem(
                f"algorithm.filter_groups.metric = {metric!r}: reward={r.name} reports only the reward itself.",
                key="algorithm.filter_groups.metric",
                hint="algorithm.filter_groups.metric=reward",
            )
        ]
    return []


# -- reward=model -------------------------------------------------------------------------------------------------


def _folder_problem(key: str, name: str, folder: Path, launching: bool) -> Problem | None:
    """A model named by a reward key that is not where it should be."""
    option = None if reward_config.is_folder(name) else reward_config.model_option(name)
    if (folder / "config.json").is_file():
        return None
    if option is None and not reward_config.is_folder(name):
        from trainctl.config.search import SearchPath
        from trainctl.suggest import closest

        guess = closest(name, list(SearchPath.default().options("model")))
        return Problem(
            f"{key} = {name!r} is neither a model option nor a model folder.",
            key=key,
            details=[f"Did you mean '{guess[0]}'?"] if guess else [],
            hint="trainctl model ls lists the options (a folder is written with a / : ./my-rm)",
        )
    from trainctl.checks.files import model_fix

    fix = model_fix(name) if option is not None else f"point {key} at a Hugging Face model folder"
    return Problem(
        f"{key} = {name} is not at {folder} (no config.json there).",
        key=key,
        hint=f"run: {fix}",
        severity="error" if launching or option is None else "warning",
    )


def _config(folder: Path) -> dict:
    try:
        return json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return {}


def _labels(config: dict) -> int:
    # transformers' default is 2 labels when the config names none: a causal LM loaded as a classifier gets 2
    return len(config.get("id2label") or {}) or int(config.get("num_labels", 2))


def _tensors(folder: Path) -> dict[str, list[int]]:
    """Tensor name -> shape, from the safetensors headers (8 bytes and a JSON header per file)."""
    shapes: dict[str, list[int]] = {}
    for f in sorted(folder.glob("*.safetensors")):
        with f.open("rb") as fh:
            (length,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(length))
        shapes.update({k: v["shape"] for k, v in header.items() if k != "__metadata__"})
    return shapes


def classifier_problems(key: str, name: str, folder: Path) -> list[Problem]:
    """A reward model loads with AutoModelForSequenceClassification, with one label and its trained head."""
    config = _config(folder)
    arch = (config.get("architectures") or [config.get("model_type", "?")])[0]
    if arch.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")):
        return [
            Problem(
                f"{key} = {name} is a causal LM ({arch}), not a reward model: a reward model is a classifier with one "
                "label (…ForSequenceClassification, num_labels 1) trained to score responses.",
                key=key,
                details=[f"{folder}/config.json: architectures = [{arch}]"],
                hint="a reward model: trainctl model ls (kind reward); to have an LLM grade responses, "
                f"reward=judge reward.judge={name}",
            )
        ]
    if not arch.endswith("ForSequenceClassification"):
        return [
            Problem(
                f"{key} = {name} is a {arch}, not a sequence classifier: trainctl loads reward models with "
                "AutoModelForSequenceClassification.",
                key=key,
                hint="a reward model: trainctl model ls (kind reward)",
            )
        ]
    problems = []
    labels = _labels(config)
    if labels != 1:
        problems.append(
            Problem(
                f"{key} = {name} has {labels} labels; a reward model has one (its logit is the reward).",
                key=key,
                details=[f"{folder}/config.json: id2label has {labels} entries"],
                hint="a reward model trained with one label (trainctl model ls, kind reward)",
            )
        )
    shapes = _tensors(folder)
    heads = {k: v for k, v in shapes.items() if k.endswith(HEAD_NAMES)}
    if shapes and not heads:
        problems.append(
            Problem(
                f"{key} = {name} has no classification head in its weights: transformers would start it at random "
                "and every reward would be noise.",
                key=key,
                details=[f"none of {', '.join(HEAD_NAMES)} in {folder}/*.safetensors"],
                hint="a reward model whose weights hold its trained head",
            )
        )
    elif any(v and v[0] != 1 for v in heads.values()):
        rows = next(v[0] for v in heads.values() if v)
        problems.append(
            Problem(
                f"{key} = {name}: its head's weights have {rows} outputs; a reward model has one.",
                key=key,
                hint="a reward model trained with one label",
            )
        )
    if not _has_chat_template(folder):
        problems.append(
            Problem(
                f"{key} = {name} has no chat template: trainctl cannot write a conversation the way it reads one.",
                key=key,
                hint=f"add the chat template it was trained with to {folder}/tokenizer_config.json",
            )
        )
    return problems


def _has_chat_template(folder: Path) -> bool:
    from trainctl.models.info import has_chat_template

    return has_chat_template(folder)


def reward_model(s: Subject) -> list[Problem]:
    r = s.cfg.reward
    folder = Path(reward_config.model_folder(r.model, s.cfg.paths.models) or "")
    option = None if reward_config.is_folder(r.model) else reward_config.model_option(r.model)
    missing = _folder_problem("reward.model", r.model, folder, s.launching)
    if missing is not None:
        # not pulled yet: its option's size still says whether it will fit
        fits = _fits(s, int(option.params), 2) if option is not None and option.params else []
        return [missing, *fits]
    problems = classifier_problems("reward.model", r.model, folder)
    if option is not None and option.kind != "reward" and not problems:
        problems.append(
            Problem(
                f"reward.model = {r.model}: its model option says kind {option.kind}.",
                key="reward.model",
                hint=f"set kind: reward in its option (conf/model/{r.model}.yaml)",
                severity="warning",
            )
        )
    return problems or _fits(s, *_params(folder))


def _params(folder: Path) -> tuple[int, int]:
    """(parameters, bytes per parameter on disk)."""
    from trainctl.models.info import DTYPE_BYTES, safetensors_params

    params, dtype = safetensors_params(folder)
    names = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}
    return params, DTYPE_BYTES.get(names.get(dtype or "", ""), 2)


def _fits(s: Subject, params: int, width: int) -> list[Problem]:
    """Where the reward model runs, its weights fit: a GPU engine's share of a GPU, or the host's memory."""
    from trainctl.models.memory import GiB

    r, hw = s.cfg.reward, s.cfg.hardware
    if not params:
        return []
    if reward_config.on_servers(r.kind, hw.rollout_engine):
        problems = []
        gpus = hw.nnodes * hw.gpus_per_node
        if r.tp > hw.gpus_per_node:
            problems.append(
                Problem(
                    f"reward.tp = {r.tp} GPUs per reward-model server, but a node has {hw.gpus_per_node}.",
                    key="reward.tp",
                    hint=f"reward.tp={hw.gpus_per_node}",
                )
            )
        if hw.gpu_memory_gb:
            weights = params * 2 / r.tp  # the engine loads bf16
            share = r.gpu_memory_utilization * hw.gpu_memory_gb * GiB
            if weights > share:
                need = weights / (hw.gpu_memory_gb * GiB)
                tp = next((t for t in (2, 4, 8) if t > r.tp and params * 2 / t <= share and t <= gpus), None)
                problems.append(
                    Problem(
                        "The reward model's weights do not fit in its server's share of a GPU:",
                        key="reward.gpu_memory_utilization",
                        details=[
                            f"{params / 1e9:.1f}B params x 2 bytes / tp {r.tp} = {weights / GiB:.1f} GiB; "
                            f"reward.gpu_memory_utilization {r.gpu_memory_utilization} x {hw.gpu_memory_gb:g} GiB = "
                            f"{share / GiB:.1f} GiB"
                        ],
                        hint=f"reward.tp={tp}" if tp else f"reward.gpu_memory_utilization={min(0.9, need + 0.1):.2f}",
                    )
                )
        return problems
    # in each reward worker, at the weights' own dtype (transformers loads dtype="auto")
    import psutil

    copies = max(1, hw.worker_processes)
    need = copies * params * width
    total = psutil.virtual_memory().total
    if need > total / 2:
        return [
            Problem(
                f"the reward model runs in each of {copies} reward workers: {copies} x {params / 1e9:.2f}B params x "
                f"{width} bytes = {need / GiB:.1f} GiB of this machine's {total / GiB:.0f} GiB.",
                key="reward.model",
                hint="hardware.worker_processes=1, or a GPU machine (verl's reward-model servers)",
                severity="warning",
            )
        ]
    return []


# -- reward=judge -------------------------------------------------------------------------------------------------


def judge(s: Subject) -> list[Problem]:
    r = s.cfg.reward
    problems = []
    if r.url:
        problems += _key(s)
    else:
        folder = Path(reward_config.model_folder(r.judge, s.cfg.paths.models) or "")
        missing = _folder_problem("reward.judge", r.judge, folder, s.launching)
        if missing is not None:
            problems.append(missing)
        else:
            arch = (_config(folder).get("architectures") or ["?"])[0]
            if arch.endswith("ForSequenceClassification"):
                problems.append(
                    Problem(
                        f"reward.judge = {r.judge} is a reward model ({arch}): a judge writes its verdict.",
                        key="reward.judge",
                        hint=f"reward=model reward.model={r.judge}",
                    )
                )
            elif not _has_chat_template(folder):
                problems.append(
                    Problem(
                        f"reward.judge = {r.judge} has no chat template: it cannot be served as a chat model.",
                        key="reward.judge",
                        hint="a chat (instruct) model as the judge",
                    )
                )
        import importlib.util

        if importlib.util.find_spec("openai") is None:
            problems.append(Problem("reward=judge needs the openai package.", key="reward", hint="pip install openai"))
    problems += _template(s)
    from trainctl.facts import verl as facts

    n = s.value("actor_rollout_ref.rollout.n")
    grouped = s.value("algorithm.adv_estimator") in facts.GROUP_ESTIMATORS  # the PPO checks say it for these
    if r.mode == "group" and isinstance(n, int) and n < 2 and not grouped:
        problems.append(
            Problem(
                f"reward.mode = group ranks a prompt's responses against each other, but rollout.n = {n}.",
                key="reward.mode",
                hint="actor_rollout_ref.rollout.n=4, or reward.mode=single",
            )
        )
    val_n = s.value("actor_rollout_ref.rollout.val_kwargs.n")
    validates = s.value("trainer.val_before_train") or (s.value("trainer.test_freq") or -1) > 0
    if r.mode == "group" and validates and isinstance(n, int) and isinstance(val_n, int) and 1 < n != val_n:
        problems.append(
            Problem(
                f"validation samples {val_n} response(s) per prompt; the judge groups {n} (rollout.n): each "
                f"validation group waits reward.group_wait_s = {r.group_wait_s:g} s before it is judged.",
                key="actor_rollout_ref.rollout.val_kwargs.n",
                hint=f"actor_rollout_ref.rollout.val_kwargs.n={n}",
                severity="warning",
            )
        )
    return problems


def _key(s: Subject) -> list[Problem]:
    from trainctl.secrets import is_secret_name

    r = s.cfg.reward
    if not r.key_env:
        return []
    problems = []
    if not is_secret_name(r.key_env):
        problems.append(
            Problem(
                f"reward.key_env = {r.key_env}: trainctl hides and forwards only variables whose name says they are "
                "secret.",
                key="reward.key_env",
                details=["names with KEY, TOKEN, SECRET, ... in them (OPENAI_API_KEY, JUDGE_API_KEY)"],
                hint=f'export JUDGE_API_KEY="${r.key_env}" and set reward.key_env=JUDGE_API_KEY',
            )
        )
    if not os.environ.get(r.key_env):
        problems.append(
            Problem(
                f"reward.key_env = {r.key_env}, but {r.key_env} is not set in this environment.",
                key="reward.key_env",
                hint=f"export {r.key_env}=... before trainctl runs (it is read when the run starts, never saved)",
            )
        )
    return problems


def _template(s: Subject) -> list[Problem]:
    import jinja2

    from trainctl.runtime.judge import load_template, render

    r = s.cfg.reward
    file = reward_config.template_file({"template": r.template, "mode": r.mode})
    key = "reward.template"
    if not Path(file).is_file():
        return [Problem(f"reward.template = {file} does not exist.", key=key, hint="reward.template=null (built-in)")]
    responses = ["5", "The answer is 4."] if r.mode == "group" else ["5"]
    try:
        text = render(load_template(file), [{"role": "user", "content": "What is 2 + 3?"}], responses, r.rubric, "5")
    except jinja2.TemplateSyntaxError as e:
        return [Problem(f"reward.template: {file}:{e.lineno} is not a valid Jinja template ({e.message}).", key=key)]
    except jinja2.TemplateError as e:
        return [
            Problem(
                f"reward.template: {file} does not render: {e}.",
                key=key,
                details=["it may use: messages, responses, response, n, rubric, ground_truth"],
            )
        ]
    if not text.strip():
        return [Problem(f"reward.template: {file} renders to nothing.", key=key)]
    if any(resp not in text for resp in responses):
        return [
            Problem(
                f"reward.template: {file} does not show the judge the response(s).",
                key=key,
                hint="render {{ response }} (single) or loop over responses (group)",
            )
        ]
    return []


def probes(s: Subject) -> list[Problem]:
    """The judge's endpoint answers one question (the native stage: it talks to the network)."""
    r = s.cfg.reward
    if s.cfg.family != "ppo" or r.kind != "judge" or not r.url or not r.judge:
        return []
    key = os.environ.get(r.key_env) if r.key_env else None
    if r.key_env and not key:
        return []  # reported by the checks
    return probe_problems(r.url, r.judge, key, r.key_env, min(r.timeout_s, PROBE_TIMEOUT_S), r.json_schema)


def probe_problems(url: str, model: str, key: str | None, key_env: str | None, timeout: float, schema: bool):
    import openai

    from trainctl.runtime.judge import probe
    from trainctl.secrets import Redactor

    def said(e: Exception) -> str:
        text = str(getattr(e, "message", None) or e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        text = Redactor({"JUDGE_API_KEY": key} if key else {}).text(text)  # a secret's name, for the Redactor
        return text[:200]

    where = f"reward.url = {url}"
    try:
        probe(url, model, key, timeout, schema)
    except openai.APITimeoutError:
        return [Problem(f"{where} did not answer within {timeout:g} s.", key="reward.url", hint=_reach(url))]
    except openai.APIConnectionError as e:
        cause = e.__cause__ or e
        return [Problem(f"{where} does not answer: {said(cause)}.", key="reward.url", hint=_reach(url))]
    except (openai.AuthenticationError, openai.PermissionDeniedError) as e:
        return [
            Problem(
                f"{where} refused the key in {key_env or '(no reward.key_env)'} (HTTP {e.status_code}): {said(e)}",
                key="reward.key_env",
                hint="check the key, or name the right variable: reward.key_env=NAME",
            )
        ]
    except openai.NotFoundError as e:
        return [
            Problem(
                f"{where} has no model {model!r}, or no chat completions at that URL (HTTP 404): {said(e)}",
                key="reward.judge",
                hint="reward.judge=<a model the endpoint serves>, and a base URL that ends where /chat/completions "
                "starts (usually .../v1)",
            )
        ]
    except openai.APIStatusError as e:
        hint = "reward.json_schema=false (if it does not support structured outputs)" if schema else None
        return [
            Problem(
                f"{where} refused the judge's request (HTTP {e.status_code}): {said(e)}", key="reward.url", hint=hint
            )
        ]
    except (openai.OpenAIError, ValueError, OSError) as e:
        return [Problem(f"{where}: the probe failed: {said(e)}", key="reward.url", hint=_reach(url))]
    return []


def _reach(url: str) -> str:
    return f"start the judge's server, or fix reward.url (curl {url.rstrip('/')}/models)"
