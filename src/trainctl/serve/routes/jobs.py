"""/api/jobs: every run and every created job; create (plan), start, stop, resume; one job's detail, log, config.

A job is a run folder under a runs root (CLI-started runs too) or a job created through the API and not started
yet; its uuid is its run folder's identity (trainctl.serve.store). The fields a job is created with, and the keys
each lands on, are trainctl.serve.planner's (JobSpec below is their API shape).
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from trainctl.serve import jobs
from trainctl.serve.routes.common import ACTION, ACTION_ANSWERS, Body, Fast, Srv, Uuid, answers, links
from trainctl.serve.views import attempt_of, detail, pending_row, run_config

router = APIRouter(prefix="/api/jobs", tags=["jobs"])


# -- request bodies ----------------------------------------------------------------------------------------------


class JobSpec(Body):
    """A job, in the fields training platforms use; each lands on trainctl's groups and keys (see
    trainctl.serve.planner), `recipe` first, `overrides` last."""

    name: str | None = Field(None, description="run.name", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
    description: str | None = Field(None, max_length=2000)
    model_path: str | None = Field(None, description="a model option (model=NAME) or a Hugging Face folder")
    algorithm: str | None = Field(None, description="algorithm=NAME: sft, dpo, grpo, ppo, dapo, ...")
    train_data_path: str | None = Field(None, description="data.train_files")
    eval_data_path: str | None = Field(None, description="data.val_files")
    num_gpus: int | None = Field(None, ge=1, description="hardware.gpus_per_node (whole nodes of 8 beyond 8)")
    learning_rate: float | None = Field(None, gt=0)
    batch_size: int | None = Field(None, ge=1)
    num_epochs: int | None = Field(None, ge=1, description="run.epochs")
    context_length: int | None = Field(None, ge=1, description="model.context_length")
    rollout_n: int | None = Field(None, ge=1, description="actor_rollout_ref.rollout.n (PPO family)")
    kl_coef: float | None = Field(None, ge=0)
    recipe: str | None = Field(None, description="recipe=NAME, composed first")
    overrides: list[str] = Field(default_factory=list, description='["key=value", ...]: anything else; they win')


class Empty(Body):
    """{}: every POST carries a JSON body, even one that says nothing more."""


class StopBody(Body):
    grace: float = Field(30.0, ge=0, le=600, description="seconds before SIGTERM becomes SIGKILL")


class ResumeBody(Body):
    overrides: list[str] = Field(default_factory=list)


# -- answers (documentation: the routes return Fast; /openapi.json describes these) -------------------------------


class PlanProblem(BaseModel):
    """One problem of a job's plan (what `train --dry-run` reports)."""

    model_config = ConfigDict(extra="allow")
    message: str
    key: str | None = None
    details: list[str] = []
    hint: str | None = None
    severity: str = "error"


class JobRow(BaseModel):
    """A job as the runs table shows it: a run (status as `runs ls` gives it) or a created job (`pending`)."""

    model_config = ConfigDict(extra="allow")
    uuid: str
    name: str | None
    status: str = Field(description="created, queued, running, done, failed, killed, interrupted, unreadable, ...")
    detail: str | None = None
    steps_done: int | None = None
    steps_total: int | None = None
    pending: bool | None = Field(None, description="true: created through the API, not started")
    algorithm: str | None = None
    family: str | None = None
    created: str | None = None


class JobDetail(JobRow):
    """A run's status, key metrics, attempts, ETA, alerts, links and lineage; a created job's plan and problems."""

    plan: str | None = None
    problems: list[PlanProblem] | None = None
    attempts: list[dict] | int | None = None
    key_metrics: dict | None = None
    alerts: list[dict] | None = None
    lineage: dict | None = None


class Created(BaseModel):
    uuid: str = Field(description="the uuid its run folder will have")
    name: str | None
    plan: str = Field(description="what `trainctl train ... --dry-run` prints; empty when a field is wrong")
    problems: list[PlanProblem] = Field(description="errors: the job cannot start until they are fixed")
    warnings: list[PlanProblem]
    notes: list[str]
    args: list[str] = Field(description="the `trainctl train` words")
    command: str
    run_dir: str | None


class Started(BaseModel):
    uuid: str
    run: str = Field(description="its run folder")
    pid: int = Field(description="its supervising trainctl process")
    trainer_pid: int | None
    attempt: int
    command: str


class Stopped(BaseModel):
    uuid: str
    message: str


class Log(BaseModel):
    attempt: int | None = Field(description="the attempt whose log this is; null before the first")
    lines: list[str]
    offset: int = Field(description="the byte offset just past these lines")


class Config(BaseModel):
    trainctl: str | None = Field(description="trainctl.yaml: the resolved config")
    backend: str | None = Field(description="the backend's own config file (verl's or TRL's)")
    backend_file: str | None
    command: str | None = Field(description="command.sh; for a created job, the command it will run")
    args: list[str]


# -- routes ------------------------------------------------------------------------------------------------------


# jobs are planned one at a time (trainctl.serve.jobs.Planner); the creates that wait hold no thread the other
# routes need
PLANNING = asyncio.Lock()
# what a job's uuid leads to
READ = ("get_job", "job_log", "job_config", "job_metrics", "job_events", "job_checkpoints", "job_actions",
        "job_rollouts")  # fmt: skip
CHANGE = ("start_job", "stop_job", "resume_job", "merge", "evaluate", "prune")


@router.get("", summary="every run (CLI-started ones too) and every job not started yet",
            responses={200: {"model": list[JobRow]}},
            openapi_extra=links(200, "$response.body#/0/uuid", *READ, *CHANGE))  # fmt: skip
def list_jobs(server: Srv) -> Fast:
    store = server.store
    rows = [e.row() for e in store.entries()]
    rows += [pending_row(j) for j in store.pending()]
    return Fast(rows)


@router.post(
    "",
    status_code=201,
    summary="plan a job (what --dry-run prints, every problem); nothing starts",
    dependencies=ACTION,
    responses={201: {"model": Created}, **ACTION_ANSWERS, **answers(500)},
    openapi_extra=links(201, "$response.body#/uuid", *READ, "start_job"),
)  # fmt: skip
async def create_job(spec: JobSpec, server: Srv) -> Fast:
    async with PLANNING:
        job = await asyncio.to_thread(jobs.create, server.store, spec.model_dump())
    keep = ("uuid", "name", "plan", "problems", "warnings", "notes", "args", "command", "run_dir")
    return Fast({k: job[k] for k in keep}, status_code=201)


@router.get("/{uuid}", summary="a job: status, steps, key metrics, attempts, ETA, alerts; a created job's plan",
            responses={200: {"model": JobDetail}, **answers(404)})  # fmt: skip
def get_job(uuid: Uuid, server: Srv) -> Fast:
    found = server.job_of(uuid)
    if found.pending is not None:
        job = found.pending
        return Fast({**pending_row(job), **{k: job.get(k) for k in ("plan", "problems", "warnings", "args", "fields")}})
    return Fast(detail(server.store, server.secrets, server.store.entry(found.root, found.path)))


@router.post(
    "/{uuid}/start",
    summary="start a created job (trainctl train ARGS, detached); returns once its trainer runs",
    dependencies=ACTION,
    responses={200: {"model": Started}, **ACTION_ANSWERS, **answers(404, 409)},
    openapi_extra=links(200, "$response.body#/uuid", *READ, "stop_job"),
)  # fmt: skip
async def start_job(uuid: Uuid, body: Empty, server: Srv) -> Fast:
    return Fast(await asyncio.to_thread(jobs.start, server.store, uuid))


@router.post("/{uuid}/stop", summary="stop a running job, as `trainctl runs stop`", dependencies=ACTION,
             responses={200: {"model": Stopped}, **ACTION_ANSWERS, **answers(404, 409)},
             openapi_extra=links(200, "$response.body#/uuid", "get_job", "resume_job"))  # fmt: skip
async def stop_job(uuid: Uuid, body: StopBody, server: Srv) -> Fast:
    _, path = server.started(uuid, "stop")
    return Fast(await asyncio.to_thread(jobs.stop, server.store, path, body.grace))


@router.post("/{uuid}/resume", summary="resume: trainctl train --resume RUN, detached", dependencies=ACTION,
             responses={200: {"model": Started}, **ACTION_ANSWERS, **answers(404, 409)},
             openapi_extra=links(200, "$response.body#/uuid", "get_job", "stop_job"))  # fmt: skip
async def resume_job(uuid: Uuid, body: ResumeBody, server: Srv) -> Fast:
    _, path = server.started(uuid, "resume")
    return Fast(await asyncio.to_thread(jobs.resume, server.store, path, body.overrides))


@router.get("/{uuid}/log", summary="the last lines of an attempt's log (none yet for a created job)",
            responses={200: {"model": Log}, **answers(404, 422)})  # fmt: skip
def job_log(
    uuid: Uuid,
    server: Srv,
    tail: Annotated[int, Query(ge=1, le=5000, description="how many lines")] = 200,
    attempt: Annotated[int | None, Query(description="which attempt (default: the last)")] = None,
) -> Fast:
    found = server.job_of(uuid)
    chosen = None
    if found.pending is None:
        e = server.store.entry(found.root, found.path)
        chosen = attempt_of(e.info.attempts, attempt)
    if chosen is None:
        return Fast({"attempt": None, "lines": [], "offset": 0})
    from trainctl.serve.reading import last_lines

    lines, end = last_lines(found.path / chosen.get("log", f"logs/attempt-{chosen['n']}.log"), tail)
    return Fast({"attempt": chosen["n"], "lines": lines, "offset": end})


@router.get("/{uuid}/config", summary="the resolved config, the backend's and command.sh",
            responses={200: {"model": Config}, **answers(404)})  # fmt: skip
def job_config(uuid: Uuid, server: Srv) -> Fast:
    found = server.job_of(uuid)
    if found.pending is not None:
        job = found.pending
        return Fast({"trainctl": None, "backend": None, "backend_file": None, "command": job.get("command"),
                     "args": job.get("args") or []})  # fmt: skip
    return Fast(run_config(server.store.entry(found.root, found.path), server.secrets))
