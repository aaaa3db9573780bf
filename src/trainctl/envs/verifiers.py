"""env=verifiers: a single-turn verifiers taskset's prompts as a run's rows, its rewards as the run's scoring.

verifiers 0.4.0 cannot live in trainctl's interpreter (it pins mcp==2.0.0 and openai<3; trainctl needs mcp>=2.3), so
it gets its own: a virtual environment trainctl makes and caches (`trainctl env install verifiers`, install() here),
found by interpreter(). Everything that touches verifiers runs there, in trainctl.runtime.verifiers_worker (stdlib and
verifiers only): a plan asks it, once per setting of the environment, for the taskset's description (its rewards, and
what they need) and its tasks, and refuses what trainctl cannot score as verifiers would (problems()); the run's
scorer (trainctl.runtime.rewards.verifiers) keeps one worker per reward process that scores each response with the
task's own Task.score.

A taskset is a module (env.id) exporting one Taskset, as verifiers' own loaders import it, built from its config's
fields (env.args); env.path puts folders on that interpreter's PYTHONPATH. Its tasks, shuffled with env.seed, are the
rows: the first env.test_size held out, the next env.train_size for training. Each row carries the task's wire data
(TaskData), from which the scorer rebuilds the task (its class, the taskset's task config): verifiers keeps a task's
data and its behaviour apart in the same way.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainctl.errors import Problem, TrainctlError
from trainctl.facts import verifiers as facts

# what the rest of trainctl reads here (the interpreter's whereabouts are facts: the config's resolvers need them too)
from trainctl.facts.verifiers import PIN as PIN
from trainctl.facts.verifiers import READY as READY
from trainctl.facts.verifiers import VENV_VAR as VENV_VAR
from trainctl.facts.verifiers import VERSION as VERSION
from trainctl.facts.verifiers import WORKER as WORKER
from trainctl.facts.verifiers import python_of as python_of
from trainctl.facts.verifiers import ready as ready

INSTALL = "trainctl env install verifiers"
# written into it while trainctl makes it: a folder with it and without READY is trainctl's, half made
MAKING = ".trainctl-making"
PREFIX = "verifiers"
# the MCP server conf/tools/verifiers.yaml names: the taskset's toolsets, served by the worker's `tools` command
SERVER = "verifiers"
# seconds a worker may take to describe a taskset and write its rows
PREPARE_TIMEOUT = 600


def default_venv() -> Path:
    """Where `trainctl env install verifiers` puts the interpreter: <home>/envs/verifiers-VERSION."""
    from trainctl.paths import home_dir

    return facts.default_venv(home_dir())


def candidates() -> list[Path]:
    """The places interpreter() looks, in order: $TRAINCTL_VERIFIERS_VENV, then the home's."""
    from trainctl.paths import home_dir

    return facts.candidates(home_dir())


def interpreter() -> Path | None:
    """The python of the first finished verifiers interpreter (None: none is installed)."""
    from trainctl.paths import home_dir

    return facts.interpreter(home_dir())


def missing_problem() -> Problem:
    return Problem(
        "env=verifiers runs verifiers in its own interpreter (verifiers pins mcp and openai versions trainctl cannot "
        "share), and none is installed here.",
        key="env",
        details=["looked in: " + ", ".join(map(str, candidates()))],
        hint=f"{INSTALL}   (a virtual environment with {PIN}, made once: about a minute)",
    )


# --- the interpreter: made once, cached ------------------------------------------------------------------------


def install_steps(target: Path, extra: list[str]) -> list[tuple[str, list[str]]]:
    """What `trainctl env install verifiers` runs: (what it does, its command)."""
    python = str(python_of(target))
    return [
        (f"a virtual environment at {target}", [sys.executable, "-m", "venv", str(target)]),
        (
            f"{PIN}" + (f" and {' '.join(extra)}" if extra else "") + " into it (pip)",
            [python, "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar", "off", PIN, *extra],
        ),
        ("a check that verifiers.v1 imports", [python, "-c", "import verifiers.v1"]),
    ]


def install(target: Path | None = None, extra: list[str] | None = None, say: Callable[[str], None] = print) -> Path:
    """Make the verifiers interpreter at `target` (default: the home's), unless it is there; returns it. `say` gets
    each step and pip's lines of what it collects and installs. A half-made one (no READY mark) is made again."""
    target = (target or default_venv()).expanduser().absolute()
    extra = list(extra or [])
    if ready(target) and not extra:
        say(f"verifiers {VERSION} is installed at {target}")
        return target
    if target.exists() and not ready(target):
        if not (target / MAKING).is_file() and any(target.iterdir()):
            raise TrainctlError(
                f"{target} holds something trainctl did not make: it will not write into it.",
                hint=f"{INSTALL} --path ANOTHER/FOLDER",
            )
        say(f"removing a half-made interpreter at {target}")
        shutil.rmtree(target)
    started = time.monotonic()
    steps = install_steps(target, extra)
    for what, argv in steps[1:] if ready(target) else steps:  # there: only the packages `extra` adds
        say(f"making {what}")
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        tail: list[str] = []
        for line in proc.stdout or ():
            tail = [*tail[-20:], line.rstrip()]
            if line.startswith(("Collecting", "Successfully installed", "ERROR")):
                say("  " + line.rstrip())
        if argv[1:3] == ["-m", "venv"] and proc.wait() == 0:
            (target / MAKING).touch()  # trainctl's, until READY: an interrupted install may remove it
        if proc.wait() != 0:
            raise TrainctlError(
                f"making {what} failed (exit {proc.returncode}).",
                details=tail[-8:],
                hint=f"{INSTALL} again once the cause is fixed (a half-made interpreter is made again)",
            )
    took = time.monotonic() - started
    (target / READY).write_text(json.dumps({"verifiers": VERSION, "extra": extra, "seconds": round(took, 1)}))
    (target / MAKING).unlink(missing_ok=True)
    say(f"verifiers {VERSION} installed at {target} in {took:.0f} s")
    return target


# --- the worker: what a plan asks of the taskset ------------------------------------------------------------------


def spec(env, python: Path | None = None) -> dict[str, Any]:
    """What the worker and the scorer need to build the taskset: its module, its arguments, the folders it is
    imported from (absolute), and the interpreter."""
    from omegaconf import OmegaConf

    args = OmegaConf.to_container(env.args, resolve=True) if OmegaConf.is_config(env.args) else dict(env.args or {})
    out = {"id": env.id, "args": args, "path": [str(Path(p).expanduser().absolute()) for p in env.path or []]}
    if python is not None:
        out["python"] = str(python)
    return out


def worker_env(paths: list[str]) -> dict[str, str]:
    """The worker's environment: trainctl's, but its PYTHONPATH only the taskset's folders (trainctl's packages are
    not verifiers')."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def worker_argv(python: Path | str, spec: dict, *command: str) -> list[str]:
    return [str(python), str(WORKER), json.dumps({"id": spec["id"], "args": spec["args"]}), *command]


@dataclasses.dataclass
class Prepared:
    description: dict[str, Any]
    tasks: list[dict[str, Any]]
    error: dict[str, str] | None = None


# spec -> what the worker said (problems() asks, rows() reads)
_PREPARED: dict[str, Prepared] = {}


def prepared(env, python: Path) -> Prepared:
    s = spec(env)
    key = json.dumps(s, sort_keys=True, default=str)
    if key not in _PREPARED:
        limit = str(env.train_size + env.test_size)
        proc = subprocess.run(
            worker_argv(python, s, "prepare", limit), env=worker_env(s["path"]), capture_output=True, text=True,
            timeout=PREPARE_TIMEOUT,
        )  # fmt: skip
        lines = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines or "error" in lines[0]:
            error = lines[-1] if lines and "error" in lines[-1] else None
            error = error or {"stage": "start", "error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
            return Prepared({}, [], error)
        _PREPARED[key] = Prepared(lines[0], lines[1:])
    return _PREPARED[key]


def problems(env) -> list[Problem]:
    found: list[Problem] = []
    if env.curriculum.enabled:
        found.append(
            Problem(
                "env.curriculum moves reasoning-gym tasks' levels; a verifiers taskset has none.",
                key="env.curriculum.enabled",
                hint="env.curriculum.enabled=false",
            )
        )
    if getattr(env, "format_score", 0.0):
        found.append(
            Problem(
                f"env.format_score = {env.format_score}: a format credit is reasoning_gym's; a verifiers taskset's "
                "rewards are its own.",
                key="env.format_score",
                hint="env.format_score=0, or a @vf.reward for the form in the taskset",
            )
        )
    if env.tasks:
        found.append(
            Problem(
                f"env.tasks = {list(env.tasks)}: env.tasks is reasoning_gym's; a verifiers taskset is env.id.",
                key="env.tasks",
                hint="env.tasks=[] env.id=MODULE",
            )
        )
    if not env.id:
        found.append(
            Problem(
                "env=verifiers needs env.id: the taskset's module (importable in verifiers' interpreter, exporting one "
                "Taskset via __all__).",
                key="env.id",
                hint="env.id=my_taskset env.path=[folder/of/it]",
            )
        )
    for i, p in enumerate(env.path or []):
        if not Path(p).expanduser().is_dir():
            found.append(Problem(f"env.path[{i}] = {p!r} is not a folder.", key=f"env.path[{i}]"))
    python = interpreter()
    if python is None:
        found.append(missing_problem())
    if found:
        return found
    p = prepared(env, python)
    if p.error is not None:
        return [_stage_problem(env, p.error)]
    return _refused(env, p.description) or _too_few(env, len(p.tasks))


def _stage_problem(env, error: dict[str, str]) -> Problem:
    stage, message = error.get("stage"), error.get("error", "")
    if stage == "import":
        return Problem(
            f"env.id = {env.id!r}: the taskset's module does not import in verifiers' interpreter: {message}",
            key="env.id",
            hint=f"env.path=[the folder holding it], or install its package there: {INSTALL} --with PACKAGE",
        )
    if stage == "config":
        return Problem(
            f"env.args = {dict(env.args)}: {env.id}'s taskset config refuses them: {message}",
            key="env.args",
            hint=f"the fields of its TasksetConfig subclass (trainctl env show verifiers:{env.id})",
        )
    return Problem(f"env.id = {env.id!r}: the taskset failed to load ({stage}): {message}", key="env.id")


def _refused(env, d: dict[str, Any]) -> list[Problem]:
    """What trainctl refuses in a taskset rather than score it otherwise than verifiers would (or not at all)."""
    name, found = f"{env.id} ({d.get('task')})", []
    if d.get("empty"):
        found.append(Problem(f"env.id = {env.id!r}: the taskset loads no task.", key="env.id"))
    for t in d.get("toolsets", []):
        found += toolset_problems(name, t)
    for need in d.get("needs", []):
        found.append(Problem(f"{name} needs {need}, which trainctl does not provide.", key="env.id"))
    for kind in ("reward", "metric"):
        for fn in d.get(kind + "s", []):
            if fn["runtime"]:
                found.append(
                    Problem(
                        f"{name}: {kind} {fn['name']!r} needs a runtime (its `runtime` parameter has no default), "
                        "which trainctl does not provide: verifiers' Task.score would skip it without a word, and the "
                        "run would train on the other rewards alone.",
                        key="env.id",
                        hint="give it `runtime=None` if it can score without one, or drop it from the task",
                    )
                )
            elif fn["sync"]:
                found.append(
                    Problem(
                        f"{name}: {kind} {fn['name']!r} is a plain function: verifiers {VERSION} awaits every {kind} "
                        "(Task.score fails on it with 'An asyncio.Future, a coroutine or an awaitable is required').",
                        key="env.id",
                        hint=f"async def {fn['name']}(...)",
                    )
                )
    if d.get("judges"):
        found.append(
            Problem(
                f"{name} has judges ({', '.join(d['judges'])}): a judge calls a model trainctl does not provide to "
                "verifiers.",
                key="env.args",
                hint="reward=judge scores with an LLM judge trainctl runs (docs/guides/rewards.md)",
            )
        )
    if not d.get("rewards") and not found:
        found.append(Problem(f"{name} declares no reward (@vf.reward): nothing to train on.", key="env.id"))
    return found


def toolset_problems(name: str, t: dict) -> list[Problem]:
    """A toolset one stdio server per agent-loop worker cannot stand for (trainctl.runtime.verifiers_worker `tools`
    says why it can for the rest)."""
    what = f"{name}: toolset {t['class']} ({t['scope']} scope)"
    reasons = []
    if t["state"]:
        reasons.append(
            "keeps per-rollout state (a vf.State), which verifiers syncs with each rollout over a state channel "
            "(VF_STATE_URL) that trainctl's agent loop does not run"
        )
    if t["setup_task"]:
        reasons.append("sets itself up for each rollout's task (setup_task), in a server of that rollout's own")
    if t["url"]:
        reasons.append(f"is a server at {t['url']}, which trainctl does not start")
    if t["runtime"]:
        reasons.append(f"runs in a {t['runtime']} runtime (a container or sandbox), which trainctl does not provide")
    hint = (
        "tools=verifiers serves toolsets that answer every rollout alike: one server for all of them per agent-loop "
        "worker (no State, no setup_task, no url, verifiers' default subprocess runtime)"
    )
    return [Problem(f"{what} {reason}.", key="env.id", hint=hint) for reason in reasons]


def tool_problems(env, tools, written: Path | None = None) -> list[Problem]:
    """env=verifiers and tools=verifiers go together exactly when the taskset has toolsets. Asked before problems()
    (nothing is written before both agree): what problems() reports is left to it. `written`: the folder of this
    setting's rows, when they are there and current: their toolsets are read from them (no worker started)."""
    has_server = SERVER in (tools.servers or {})
    if env.kind != "verifiers":
        if has_server:
            return [
                Problem(
                    f"tools.servers.{SERVER} serves the toolsets of env=verifiers' taskset (tools=verifiers), and "
                    f"env={env.name} has none.",
                    key="tools",
                    hint="env=verifiers env.id=MODULE, or tools=none",
                )
            ]
        return []
    first = _first_row(written) if written is not None else None
    if first is not None and first.get("toolsets") is not None:
        toolsets = json.loads(first["toolsets"])
    else:
        python = interpreter()
        if python is None or not env.id:
            return []  # problems() names what is missing
        described = prepared(env, python)
        if described.error is not None:
            return []  # problems() names the error
        toolsets = [t["class"] for t in described.description.get("toolsets", [])]
    if toolsets and not has_server:
        return [
            Problem(
                f"{env.id}'s taskset has toolsets ({', '.join(toolsets)}): the model calls their tools in verl's agent "
                f"loop, which tools=verifiers gives it (now tools={tools.name}).",
                key="tools",
                hint="tools=verifiers",
            )
        ]
    if has_server and not toolsets:
        return [
            Problem(
                f"tools=verifiers serves a taskset's toolsets, and {env.id}'s has none.",
                key="tools",
                hint="tools=none",
            )
        ]
    return []


def _too_few(env, n: int) -> list[Problem]:
    if n > env.test_size:
        return []
    return [
        Problem(
            f"env.test_size = {env.test_size}: {env.id} has {n} tasks, and the held-out split would leave none to "
            "train on.",
            key="env.test_size",
            hint=f"env.test_size={max(1, n // 5)}",
        )
    ]


def rows(env, split: str):
    """The split's rows (problems() found none: its worker's answer is cached)."""
    found = _PREPARED[json.dumps(spec(env), sort_keys=True, default=str)]
    tasks = list(found.tasks)
    toolsets = json.dumps([t["class"] for t in found.description.get("toolsets", [])])
    random.Random(env.seed).shuffle(tasks)
    chosen = tasks[: env.test_size] if split == "test" else tasks[env.test_size : env.test_size + env.train_size]
    s = json.dumps(spec(env, interpreter()))
    for index, task in enumerate(chosen):
        yield {
            "data_source": f"{PREFIX}/{env.id}",
            "prompt": task["messages"],
            "ability": PREFIX,
            # the task's own rewards grade the response (no single answer stands for them): its key stands here
            "reward_model": {"style": "rule", "ground_truth": task["key"]},
            "extra_info": {
                "split": split,
                "index": index,
                "task": env.id,
                "key": task["key"],
                # the task's wire data (the scorer rebuilds the task from it) and how to reach the taskset
                "data": json.dumps(task["data"]),
                "spec": s,
                # what the next plan's tool check reads instead of asking the worker again
                "toolsets": toolsets,
            },
        }


def _first_row(folder: Path) -> dict | None:
    """The extra_info of the first train row written into `folder` (None: none is there)."""
    rows_file = next(folder.rglob("train.parquet"), None)
    if rows_file is None:
        return None
    import pyarrow.parquet as pq

    first = pq.read_table(rows_file, columns=["extra_info"]).slice(0, 1).to_pylist()
    return first[0]["extra_info"] if first else None


def current(env, folder: Path) -> bool:
    """Whether rows written earlier still hold: the interpreter they name is there."""
    first = _first_row(folder)
    python = json.loads(first["spec"]).get("python") if first else None
    return python is not None and python == str(interpreter())


def tasks() -> list[str]:
    """verifiers has no registry of tasksets (an id is any module): none to list."""
    return []


def status() -> str:
    """`trainctl env ls`'s line."""
    python = interpreter()
    if python is None:
        return f"verifiers: not installed ({INSTALL})"
    return (
        f"verifiers: {PIN} at {python.parent.parent} (env=verifiers env.id=MODULE: any single-turn taskset module "
        "importable there; trainctl env show verifiers:MODULE)"
    )


def describe(task: str, n: int = 3, seed: int = 0) -> dict[str, Any]:
    """A taskset's description from the worker (task: MODULE, or MODULE with env.path folders after a colon)."""
    python = interpreter()
    if python is None:
        raise TrainctlError(missing_problem().message, hint=INSTALL)
    module, _, paths = task.partition(":")
    s = {"id": module, "args": {}, "path": [str(Path(p).absolute()) for p in paths.split(",") if p]}
    proc = subprocess.run(
        worker_argv(python, s, "prepare", str(max(n, 1))), env=worker_env(s["path"]), capture_output=True, text=True,
        timeout=PREPARE_TIMEOUT,
    )  # fmt: skip
    lines = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines or "error" in lines[0]:
        message = lines[-1]["error"] if lines and "error" in lines[-1] else proc.stderr.strip()[-500:]
        raise TrainctlError(f"verifiers taskset {module!r}: {message}", hint="env.path: verifiers:MODULE:FOLDER")
    return {"description": lines[0], "tasks": lines[1 : 1 + n]}
