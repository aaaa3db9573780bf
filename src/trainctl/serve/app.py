"""The server: the REST API under /api (described by /openapi.json), the live stream, /metrics for Prometheus, the
pages and files. `build(config)` returns the ASGI app uvicorn serves, wrapped in the security layers
(trainctl.serve.security: Redact outside Guard outside the routes)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

import orjson
from fastapi import Body, FastAPI, Query, Request
from fastapi.responses import PlainTextResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field

from trainctl.errors import TrainctlError
from trainctl.serve import jobs
from trainctl.serve.events import Cursor, RunStream
from trainctl.serve.reading import (
    as_columns,
    as_rows,
    last_lines,
    read_run_metrics,
)
from trainctl.serve.security import Guard, Redact, Secrets, allowed_hosts, safe_path
from trainctl.serve.store import RunStore
from trainctl.serve.views import (
    attempt_of,
    checkpoints,
    comparison,
    detail,
    gpu_data,
    pending_row,
    run_config,
    trainctl_value,
)

STATIC = Path(__file__).parent / "static"
# files served from run folders are text (logs, configs, JSONL), at most this big (a whole log: `trainctl runs logs`)
MAX_FILE_BYTES = 32 << 20
TEXT_SUFFIXES = {".log", ".txt", ".json", ".jsonl", ".yaml", ".yml", ".sh", ".md", ".csv", ".py"}


@dataclass
class ServeConfig:
    roots: list[Path]
    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = None
    allow_actions: bool = False
    allow_hosts: list[str] = field(default_factory=list)
    gpus: object = None  # a callable returning GpuStat items (tests); None: NVML


class Fast(Response):
    """JSON through orjson (a 10k-step history in milliseconds); NaN and infinities become null."""

    media_type = "application/json"

    def render(self, content) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_NON_STR_KEYS, default=str)


class JobSpec(BaseModel):
    """A job, in the fields training platforms use; each lands on trainctl's groups and keys (see
    trainctl.serve.planner), `recipe` first, `overrides` last."""

    model_config = ConfigDict(extra="forbid")
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


class StopBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    grace: float = Field(30.0, ge=0, le=600, description="seconds before SIGTERM becomes SIGKILL")


class ResumeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    overrides: list[str] = Field(default_factory=list)


class MergeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    step: int
    dtype: Literal["auto", "bf16", "fp16", "fp32"] = "auto"
    part: Literal["actor", "critic"] | None = None


class EvalBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    step: int
    split: Literal["test", "train"] = "test"
    limit: int | None = Field(None, ge=1)


class PruneBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    keep_last: int = Field(..., ge=1)
    keep_best: str | None = None
    mode: Literal["min", "max"] | None = None
    confirm: list[str] | None = Field(None, description="the paths the preview showed: deletes exactly those")


class Empty(BaseModel):
    model_config = ConfigDict(extra="forbid")


def create_app(config: ServeConfig) -> FastAPI:
    secrets = Secrets(token=config.token)
    store = RunStore(config.roots, on_secret_names=secrets.add_names)
    actions = jobs.Actions()
    app = FastAPI(
        title="trainctl serve",
        version="1",
        description="Runs, jobs, metrics and checkpoints of the run folders this server reads.",
        docs_url=None,  # Swagger UI and ReDoc load from a CDN: off; /openapi.json stays
        redoc_url=None,
        swagger_ui_oauth2_redirect_url=None,
    )
    app.state.store, app.state.secrets, app.state.config, app.state.actions = store, secrets, config, actions

    @app.exception_handler(jobs.ActionError)
    async def _action_error(request: Request, e: jobs.ActionError):
        return Fast({"error": e.message, "hint": e.hint, "details": e.details}, status_code=e.status)

    @app.exception_handler(TrainctlError)
    async def _trainctl_error(request: Request, e: TrainctlError):
        return Fast({"error": e.message, "hint": e.hint, "details": e.details}, status_code=422)

    def need_actions() -> None:
        if not config.allow_actions:
            raise jobs.ActionError(
                "actions are off on this server.",
                403,
                hint="start it with --allow-actions to create, start, stop and resume jobs and to merge, evaluate "
                "and prune checkpoints",
            )

    def run_of(uuid: str) -> tuple[Path, Path]:
        found = store.find(uuid)
        if found is None:
            raise jobs.ActionError(f"no run {uuid}.", 404, hint="GET /api/jobs lists them")
        return found

    def entry_of(uuid: str):
        root, path = run_of(uuid)
        return store.entry(root, path)

    # -- jobs ------------------------------------------------------------------------------------------------------

    @app.get("/api/jobs", tags=["jobs"], summary="every run (CLI-started ones too) and every job not started yet")
    def list_jobs() -> Fast:
        rows = [e.row() for e in store.entries()]
        rows += [pending_row(j) for j in store.pending()]
        return Fast(rows)

    @app.post(
        "/api/jobs",
        tags=["jobs"],
        status_code=201,
        summary="plan a job (what --dry-run prints, every problem); nothing starts",
    )
    def create_job(spec: JobSpec) -> Fast:
        need_actions()
        job = jobs.create(store, spec.model_dump())
        keep = ("uuid", "name", "plan", "problems", "warnings", "notes", "args", "command", "run_dir")
        return Fast({k: job[k] for k in keep}, status_code=201)

    @app.get("/api/jobs/{uuid}", tags=["jobs"], summary="a job: status, steps, key metrics, attempts, ETA, alerts")
    def get_job(uuid: str) -> Fast:
        pending = store.pending_job(uuid)
        if pending and not store.find(uuid):
            return Fast(
                {
                    **pending_row(pending),
                    **{k: pending.get(k) for k in ("plan", "problems", "warnings", "args", "command", "fields")},
                }
            )
        return Fast(detail(store, secrets, entry_of(uuid)))

    @app.post("/api/jobs/{uuid}/start", tags=["jobs"], summary="start a created job (trainctl train ARGS, detached)")
    async def start_job(uuid: str, body: Annotated[Empty, Body()] = None) -> Fast:
        need_actions()
        return Fast(await asyncio.to_thread(jobs.start, store, uuid))

    @app.post("/api/jobs/{uuid}/stop", tags=["jobs"], summary="stop a running job, as `trainctl runs stop`")
    async def stop_job(uuid: str, body: StopBody) -> Fast:
        need_actions()
        _, path = run_of(uuid)
        return Fast(await asyncio.to_thread(jobs.stop, store, path, body.grace))

    @app.post("/api/jobs/{uuid}/resume", tags=["jobs"], summary="resume: trainctl train --resume RUN, detached")
    async def resume_job(uuid: str, body: ResumeBody) -> Fast:
        need_actions()
        _, path = run_of(uuid)
        return Fast(await asyncio.to_thread(jobs.resume, store, path, body.overrides))

    @app.get(
        "/api/jobs/{uuid}/metrics",
        tags=["jobs"],
        summary='metric history: [{"step": N, "<metric>": value}]; ?since=STEP for what is new',
    )
    def job_metrics(
        uuid: str,
        since: Annotated[int | None, Query(description="only steps after this one")] = None,
        keys: Annotated[str | None, Query(description="comma-separated metric names (default: all)")] = None,
        format: Annotated[Literal["rows", "columns"], Query(description="columns: what charts read")] = "rows",
    ) -> Fast:
        _, path = run_of(uuid)
        m = read_run_metrics(path)
        wanted = [k for k in keys.split(",") if k] if keys else None
        cursor = str(Cursor(m.attempt, m.offset, None))
        if format == "columns":
            return Fast({**as_columns(m.steps, wanted, since), "cursor": cursor})
        return Fast(as_rows(m.steps, wanted, since), headers={"X-Trainctl-Cursor": cursor})

    @app.get(
        "/api/jobs/{uuid}/checkpoints",
        tags=["checkpoints"],
        summary='[{"step", "path", "eval_results"}]: `ckpt ls` with the scores `trainctl eval` wrote',
    )
    def job_checkpoints(uuid: str) -> Fast:
        _, path = run_of(uuid)
        return Fast(checkpoints(path))

    @app.get(
        "/api/jobs/{uuid}/events",
        tags=["jobs"],
        summary="SSE: metrics, status, progress, alerts, log lines; the event id is the file offsets",
    )
    async def job_events(
        uuid: str,
        request: Request,
        cursor: Annotated[str | None, Query(description="where to start: the cursor /metrics answered")] = None,
    ) -> StreamingResponse:
        root, path = run_of(uuid)
        last = request.headers.get("last-event-id")
        start = Cursor.parse(last) or Cursor.parse(cursor)
        stream = RunStream(path, lambda: store.entry(root, path).row(), start, resumed=bool(Cursor.parse(last)))
        return StreamingResponse(
            stream.events(request.is_disconnected),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    @app.get("/api/jobs/{uuid}/log", tags=["jobs"], summary="the last lines of an attempt's log")
    def job_log(uuid: str, tail: Annotated[int, Query(ge=1, le=5000)] = 200, attempt: int | None = None) -> Fast:
        e = entry_of(uuid)
        chosen = attempt_of(e.info.attempts, attempt)
        if chosen is None:
            return Fast({"attempt": None, "lines": [], "offset": 0})
        lines, end = last_lines(e.path / chosen.get("log", f"logs/attempt-{chosen['n']}.log"), tail)
        return Fast({"attempt": chosen["n"], "lines": lines, "offset": end})

    @app.get("/api/jobs/{uuid}/config", tags=["jobs"], summary="the resolved config, the backend's and command.sh")
    def job_config(uuid: str) -> Fast:
        e = entry_of(uuid)
        return Fast(run_config(e, secrets))

    @app.get("/api/jobs/{uuid}/rollouts", tags=["trajectories"], summary="the steps with trajectories")
    def job_rollouts(uuid: str) -> Fast:
        from trainctl.serve.trajectories import step_summary

        _, path = run_of(uuid)
        return Fast(step_summary(path))

    @app.get(
        "/api/jobs/{uuid}/rollouts/{step}",
        tags=["trajectories"],
        summary="one step's trajectories as turns; filter by reward, tool errors, prompt",
    )
    def job_rollout_step(
        uuid: str,
        step: int,
        min_reward: float | None = None,
        max_reward: float | None = None,
        errors: Literal["only", "none"] | None = None,
        prompt: str | None = None,
    ) -> Fast:
        from trainctl.serve.trajectories import read_step, select

        _, path = run_of(uuid)
        return Fast(select(read_step(path, step), min_reward, max_reward, errors, prompt))

    @app.get("/api/jobs/{uuid}/prompts/{key}", tags=["trajectories"], summary="one prompt's trajectories, every step")
    def job_prompt(uuid: str, key: str) -> Fast:
        from trainctl.serve.trajectories import read_step, select, steps

        _, path = run_of(uuid)
        return Fast([t for s in steps(path) for t in select(read_step(path, s), prompt=key)])

    # -- checkpoint tools ----------------------------------------------------------------------------------------

    @app.post(
        "/api/jobs/{uuid}/checkpoints/merge",
        tags=["checkpoints"],
        summary="trainctl ckpt merge STEP, in the background",
    )
    def merge(uuid: str, body: MergeBody) -> Fast:
        need_actions()
        _, path = run_of(uuid)
        target = jobs.checkpoint_path(path, body.step)
        args = ["ckpt", "merge", str(target), "--dtype", body.dtype, *(["--part", body.part] if body.part else [])]
        return Fast(actions.run("merge", path, args).data(), status_code=202)

    @app.post(
        "/api/jobs/{uuid}/checkpoints/eval",
        tags=["checkpoints"],
        summary="trainctl eval STEP on a split, in the background (scores land in eval/)",
    )
    def evaluate(uuid: str, body: EvalBody) -> Fast:
        need_actions()
        e = entry_of(uuid)
        target = jobs.checkpoint_path(e.path, body.step)
        args = ["eval", str(target), *(["--limit", str(body.limit)] if body.limit else [])]
        if body.split == "train":
            train = trainctl_value(e.path, ("data", "train_files"))
            if not train:
                raise jobs.ActionError(f"{e.path.name} names no training file.", 422)
            args.append(f"data.val_files={train}")
        return Fast(actions.run("eval", e.path, args).data(), status_code=202)

    @app.post(
        "/api/jobs/{uuid}/checkpoints/prune",
        tags=["checkpoints"],
        summary="what pruning would delete; with confirm (the paths shown), deletes exactly those",
    )
    def prune(uuid: str, body: PruneBody) -> Fast:
        need_actions()
        _, path = run_of(uuid)
        return Fast(jobs.prune(path, body.keep_last, body.keep_best, body.mode, body.confirm))

    @app.get("/api/actions/{aid}", tags=["checkpoints"], summary="a merge or eval the server started")
    def action(aid: str) -> Fast:
        found = actions.get(aid)
        if found is None:
            raise jobs.ActionError(f"no action {aid}.", 404)
        return Fast(found.data())

    # -- the rest ----------------------------------------------------------------------------------------------------

    @app.get("/api/compare", tags=["runs"], summary="runs side by side: the config keys that differ, metrics")
    def compare_runs(runs: Annotated[str, Query(description="comma-separated uuids or names (2 or more)")]) -> Fast:
        return Fast(comparison(store, [k for k in runs.split(",") if k]))

    @app.get("/api/gpus", tags=["gpus"], summary="utilisation, memory, temperature, power per GPU (NVML)")
    def gpus() -> Fast:
        return Fast(gpu_data(config.gpus))

    @app.get("/api/groups", tags=["launch"], summary="the config groups and their options, the recipes")
    def groups() -> Fast:
        from trainctl.config.search import GROUPS, SearchPath

        search = SearchPath.default()
        return Fast({"groups": {g: list(search.options(g)) for g in GROUPS}, "actions": config.allow_actions})

    @app.get("/metrics", tags=["prometheus"], summary="Prometheus exposition of the runs and GPUs")
    def prometheus() -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        if app.state.registry is None:
            from trainctl.serve.prom import registry

            app.state.registry = registry(store, config.gpus)
        return Response(generate_latest(app.state.registry), media_type=CONTENT_TYPE_LATEST)

    app.state.registry = None

    @app.get("/files/{uuid}/{path:path}", tags=["files"], summary="a text file of a run folder (logs, configs)")
    def run_file(uuid: str, path: str, request: Request) -> Response:
        found = store.find(uuid)
        target = safe_path(found[1], path, request.scope.get("raw_path", b"").split(b"/", 3)[-1]) if found else None
        if target is None or not target.is_file() or target.suffix not in TEXT_SUFFIXES:
            return PlainTextResponse("Not found.", status_code=404)
        if target.stat().st_size > MAX_FILE_BYTES:
            return PlainTextResponse(
                f"{target.name} is over {MAX_FILE_BYTES >> 20} MB: read it with trainctl runs logs or on the machine.",
                status_code=413,
            )
        return PlainTextResponse(target.read_text(errors="replace"))

    from trainctl.serve import pages

    pages.add_routes(app, store, secrets, config)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def build(config: ServeConfig):
    """The ASGI app: the routes behind the Guard (host, token, POST rules), all behind the Redactor."""
    app = create_app(config)
    hosts = allowed_hosts(config.host, config.allow_hosts)
    from trainctl.serve.pages import login_page

    outer = Redact(Guard(app, config.token, hosts, login_page), app.state.secrets)
    outer.inner = app
    return outer
