"""The interpreter a Ray job runs on its cluster, asked before the job is submitted.

A job's entrypoint (`python -m verl.trainer.main_ppo ...`) runs the `python` on the PATH of the `ray start` that
started the cluster's head, not this environment's. A head started from a shell whose `python` is not the venv's
takes the job, and the job fails there minutes later ("No module named 'verl'", exit 3). So before submitting (and in
`trainctl doctor`) a tiny job asks that interpreter which versions of the run's packages it has, without importing
them (importlib.metadata, importlib.util.find_spec: a second at most), and they are compared with this environment's,
the versions the run's lock.json records. A verdict that holds is kept in trainctl's cache, by cluster session (a
restarted head is asked again), entrypoint program and versions wanted; one that fails is asked again next time.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainctl.errors import Problem, TrainctlError

MARKER = "TRAINCTL_JOB_PYTHON"
# runs under whatever Python the cluster has: the standard library only, nothing imported from the packages asked for
_PROBE = r"""
import json, shutil, sys
from importlib import metadata, util
names, modules, programs = json.loads(sys.argv[1])
def version(name):
    try:
        return metadata.version(name)
    except Exception:
        return None
def found(module):
    try:
        return util.find_spec(module) is not None
    except Exception:
        return False
print("TRAINCTL_JOB_PYTHON " + json.dumps({
    "executable": sys.executable, "python": sys.version.split()[0],
    "versions": {n: version(n) for n in names}, "modules": {m: found(m) for m in modules},
    "programs": {p: shutil.which(p) for p in programs},
}), flush=True)
"""
# the module each package is imported as
_MODULES = {"hydra-core": "hydra", "trainctl": "trainctl.runtime"}
# where a config names trainctl's runtime (a reward manager, a tool class, the TRL entry point)
_RUNTIME = re.compile(r"trainctl[./]runtime")


@dataclass
class Needs:
    """What a run's job needs from the cluster's interpreter: its entrypoint's program, and packages at versions."""

    program: str  # python, or torchrun
    versions: dict[str, str]  # package -> the version here (the run's lock.json)
    why: dict[str, str] = field(default_factory=dict)  # package -> why the run needs it, where not obvious


def _public(version: str) -> str:
    """2.13.0+cpu -> 2.13.0: the local label names a build (CPU, a CUDA version), which differs between machines."""
    return version.split("+", 1)[0]


def needs(plan: Any) -> Needs:
    """The packages a run's job imports on the cluster, at this environment's versions (the run's lock.json).

    `plan`: a trainctl.plan.Plan (launchers sit below it: only its attributes are read). Its command is this
    machine's; the job's runs the same module under the cluster's `python` (or `torchrun`)."""
    cfg = plan.cfg
    argv = [str(a) for a in plan.command.argv]
    trainer = plan.backend.name.split("-")[0]  # verl-ppo, verl-sft -> verl; trl-dpo -> trl
    wanted = [trainer, "torch", "transformers", "ray"]
    why: dict[str, str] = {}
    if _RUNTIME.search(" ".join(argv) + "\n" + json.dumps(plan.built.leaves, default=str)):
        wanted.append("trainctl")
        why["trainctl"] = "its entrypoint or config names trainctl.runtime"
    elif trainer == "verl" and cfg.hardware.device == "cpu":
        wanted.append("trainctl")
        why["trainctl"] = "verl on CPU loads trainctl's plugin"
    if trainer == "trl" and cfg.lora.rank:
        wanted.append("peft")
    if cfg.family == "ppo":
        engine = plan.value("actor_rollout_ref.rollout.name")
        if engine in ("vllm", "sglang"):
            wanted.append(engine)
    torchrun = any(Path(a).name == "torchrun" or a == "torch.distributed.run" for a in argv[:3])
    return Needs("torchrun" if torchrun else "python", {n: v for n in wanted if (v := _installed(n))}, why)


def _installed(name: str) -> str | None:
    """This environment's version of a package, as the run's lock.json records it (trainctl.launch.lock)."""
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _cache_file(address: str, session: str, want: Needs):
    from trainctl.paths import cache_dir

    key = json.dumps([address, session, want.program, want.versions], sort_keys=True)
    return cache_dir() / "ray-job-python" / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"


@dataclass
class Verdict:
    executable: str  # the cluster's `python`, as sys.executable says it
    problems: list[str]  # what it lacks or has at another version; empty: it runs the job
    cached: bool = False

    @property
    def ok(self) -> bool:
        return not self.problems


def ask(address: str, want: Needs, timeout: float = 120.0) -> Verdict:
    """The cluster's answer: the job's interpreter against what the run needs (cached while it holds)."""
    from trainctl.launchers import ray_jobs
    from trainctl.paths import atomic_write_text

    url = ray_jobs.http_address(address)
    session = ray_jobs.session_name(url)
    cache = _cache_file(url, session, want) if session else None
    if cache is not None and cache.is_file():
        try:
            return Verdict(json.loads(cache.read_text())["executable"], [], cached=True)
        except (OSError, ValueError, KeyError):
            pass
    names = list(want.versions)
    modules = [_MODULES.get(n, n) for n in names]
    programs = [want.program] if want.program != "python" else []
    args = json.dumps([names, modules, programs])
    entrypoint = f"python -c {shlex.quote(_PROBE)} {shlex.quote(args)}"
    answer, info, logs = ray_jobs.probe(url, entrypoint, MARKER, "the check of the cluster's Python", timeout)
    if not isinstance(answer, dict):
        last = [line for line in logs.splitlines() if line.strip()][-1:] or [info.message or info.status]
        return Verdict("python", [f"the job's `python` did not run ({last[0].strip()})"])
    verdict = Verdict(answer["executable"], _compare(answer, want, names, modules))
    if verdict.ok and cache is not None:
        atomic_write_text(cache, json.dumps({"executable": verdict.executable, "python": answer.get("python")}))
    return verdict


def _compare(answer: dict[str, Any], want: Needs, names: list[str], modules: list[str]) -> list[str]:
    lacks, other = [], []
    for name, module in zip(names, modules, strict=True):
        there, here = answer["versions"].get(name), want.versions[name]
        if there is None or not answer["modules"].get(module):
            lacks.append(name)
        elif _public(there) != _public(here):
            other.append(f"{name} {there} where the run's lock.json has {here}")
    problems = [f"lacks {_and(lacks)}"] if lacks else []
    problems += [f"has {text}" for text in other]
    problems += [f"has no `{program}` on its PATH" for program, path in answer.get("programs", {}).items() if not path]
    return problems


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def problem(address: str, verdict: Verdict, want: Needs) -> Problem:
    """The verdict as a launch's refusal: the interpreter, what it lacks, and how to fix it."""
    pins = " ".join(f"'{n}=={_public(v)}'" for n, v in want.versions.items())
    needed = ", ".join(f"{n} {v}" + (f" ({want.why[n]})" if n in want.why else "") for n, v in want.versions.items())
    return Problem(
        f"the Ray cluster at {address} would run this job with {verdict.executable} (the `python` on the PATH of "
        f"the `ray start` that started it), which {'; '.join(verdict.problems)}.",
        key="hardware.ray_address",
        details=[f"the run needs: {needed}"],
        hint="start the cluster from this run's environment: activate the venv, then `ray start --head ...` (a job "
        f"runs the `python` its node's `ray start` found); or install them there: {verdict.executable} -m pip install "
        f"{pins}",
    )


def check(plan: Any) -> list[Problem]:
    """A launch's preflight: [] when the cluster's interpreter runs the job, else the one problem."""
    address = str(plan.cfg.hardware.ray_address)
    want = needs(plan)
    try:
        verdict = ask(address, want)
    except TrainctlError as e:
        return [Problem(f"could not ask the Ray cluster at {address} about its Python: {e.message}", hint=e.hint)]
    return [] if verdict.ok else [problem(address, verdict, want)]
