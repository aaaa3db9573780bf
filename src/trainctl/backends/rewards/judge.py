"""reward=judge: an LLM judge scores each response, or ranks each prompt's responses against each other (RULER-style),
through trainctl's reward manager (trainctl.runtime.judge.JudgeRewardManager), which verl loads with importlib and
which reads `reward.reward_kwargs.trainctl`.

The judge is any OpenAI-compatible endpoint (`reward.url`; its key read from the variable `reward.key_env` names,
never saved), or a model the run serves itself with `transformers serve`. Before anything starts: its model, key and
template; in the native stage one probe of its endpoint.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from trainctl.backends.rewards.base import (
    RewardKind,
    architecture,
    has_chat_template,
    model_config,
    named_model,
    only_reward_metric,
    run_dir,
)
from trainctl.backends.rewards.registry import register
from trainctl.config.schema import opt
from trainctl.errors import Problem

if TYPE_CHECKING:
    from trainctl.checks.base import Subject

MANAGER = ("pkg://trainctl.runtime.judge", "JudgeRewardManager")
# the built-in prompt templates, one per mode (they ship beside the manager that renders them)
TEMPLATES_DIR = Path(__file__).resolve().parents[2] / "runtime" / "judge_templates"
PROBE_TIMEOUT_S = 15.0
# the settings the manager reads as they are
PASSED = (
    "mode",
    "rubric",
    "timeout_s",
    "retries",
    "max_tokens",
    "temperature",
    "concurrency",
    "json_schema",
    "failure_score",
    "group_wait_s",
)


@dataclass
class JudgeSettings:
    judge: str | None = opt(
        "the judge model: the name the endpoint serves (with reward.url), else a model option or folder the run "
        "serves itself"
    )
    url: str | None = opt(
        "an OpenAI-compatible endpoint's base URL, e.g. https://api.openai.com/v1 (null: the run serves "
        "reward.judge with `transformers serve`)"
    )
    key_env: str | None = opt(
        "the environment variable that holds the endpoint's API key (read at run time, never saved or logged)"
    )
    mode: Literal["group", "single"] = opt(
        "group (rank each prompt's responses against each other, scores in [0, 1], RULER-style) or single (score "
        "each response alone)",
        "group",
    )
    template: str | None = opt(
        "a Jinja prompt template file (null: the built-in one for the mode; see trainctl/runtime/judge)"
    )
    rubric: str | None = opt("what a good response is, shown to the judge (null: a general rubric)")
    timeout_s: float = opt("seconds one judge request may take", 120.0, gt=0)
    retries: int = opt("retries of a request that failed to connect, timed out or got a 5xx/429", 2, ge=0)
    max_tokens: int = opt("the longest answer the judge may write", 1024, ge=1)
    temperature: float = opt("sampling temperature of the judge", 0.0, ge=0)
    concurrency: int = opt("requests in flight at once", 8, ge=1)
    json_schema: bool = opt(
        "ask for JSON that matches the scores' schema (OpenAI structured outputs; vLLM/SGLang guided decoding)", True
    )
    failure_score: float = opt(
        "the score of a response the judge failed on (garbage, timeout): counted, never fatal", 0.0
    )
    group_wait_s: float = opt(
        "how long a group waits for its last responses before it is judged without them (group mode)", 120.0, gt=0
    )


def template_file(s: JudgeSettings) -> str:
    """The judge's prompt template: the user's file, else the built-in one for the mode."""
    if s.template:
        return str(Path(s.template).expanduser().resolve())
    return str(TEMPLATES_DIR / f"{s.mode}.jinja")


@register("judge")
class Judge(RewardKind):
    summary = "an LLM judge scores or ranks the responses"
    Settings = JudgeSettings
    needs = {"judge": "gpt-4.1-mini reward.url=https://api.openai.com/v1"}
    scores_every_row = True
    needs_ground_truth = False

    def secret_env(self, cfg) -> dict[str, str]:
        key_env = self.settings(cfg.reward).key_env
        return {key_env: "the judge (reward.key_env)"} if key_env else {}

    def verl(self, cfg, search):
        s = self.settings(cfg.reward)
        local = not s.url
        if local and s.judge:
            # a local judge is served from its folder, and transformers serve names it by its path
            model = str(named_model("reward.judge", s.judge, cfg.paths.models, search).folder)
        else:
            model = s.judge
        # what the manager reads inside the run: plain values, never a secret (the key is named by its variable
        # and read in the reward worker)
        settings = {
            "kind": self.name,
            "run_dir": run_dir(cfg),
            "url": s.url,
            "model": model,
            "serve": local,
            "key_env": s.key_env,
            "template": template_file(s),
            **{k: getattr(s, k) for k in PASSED},
        }
        module, name = MANAGER
        return {
            "reward_manager": {"source": "importlib", "name": name, "module": {"path": module}},
            "reward_kwargs": {"trainctl": settings},
        }

    def manager(self, cfg):
        return MANAGER

    def checks(self, s: Subject) -> list[Problem]:
        r = self.settings(s.cfg.reward)
        problems = only_reward_metric(s) if s.value("algorithm.filter_groups.enable") else []
        if not r.judge:
            return problems
        if r.url:
            problems += _key(r)
        else:
            problems += _local_judge(s, r)
        problems += _template(r)
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

    def probes(self, s: Subject) -> list[Problem]:
        """The judge's endpoint answers one question."""
        r = self.settings(s.cfg.reward)
        if not r.url or not r.judge:
            return []
        key = os.environ.get(r.key_env) if r.key_env else None
        if r.key_env and not key:
            return []  # reported by the checks
        return probe_problems(r.url, r.judge, key, r.key_env, min(r.timeout_s, PROBE_TIMEOUT_S), r.json_schema)


def _local_judge(s: Subject, r: JudgeSettings) -> list[Problem]:
    """A judge the run serves: a chat model that is there."""
    import importlib.util

    problems = []
    named = named_model("reward.judge", r.judge, s.cfg.paths.models, s.comp.search)
    missing = named.problem(s.launching, s.comp.search)
    if missing is not None:
        problems.append(missing)
    else:
        arch = architecture(model_config(named.folder))
        if arch.endswith("ForSequenceClassification"):
            problems.append(
                Problem(
                    f"reward.judge = {r.judge} is a reward model ({arch}): a judge writes its verdict.",
                    key="reward.judge",
                    hint=f"reward=model reward.model={r.judge}",
                )
            )
        elif not has_chat_template(named.folder):
            problems.append(
                Problem(
                    f"reward.judge = {r.judge} has no chat template: it cannot be served as a chat model.",
                    key="reward.judge",
                    hint="a chat (instruct) model as the judge",
                )
            )
    if importlib.util.find_spec("openai") is None:
        problems.append(Problem("reward=judge needs the openai package.", key="reward", hint="pip install openai"))
    return problems


def _key(r: JudgeSettings) -> list[Problem]:
    from trainctl.secrets import is_secret_name

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


def _template(r: JudgeSettings) -> list[Problem]:
    import jinja2

    from trainctl.runtime.judge import load_template, render

    file = template_file(r)
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


def probe_problems(url: str, model: str, key: str | None, key_env: str | None, timeout: float, schema: bool):
    """Ask the endpoint one question; each way it can fail as one problem that names the setting to fix."""
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
