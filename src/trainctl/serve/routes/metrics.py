"""A job's metrics: its history (/api/jobs/{uuid}/metrics), its live stream (/api/jobs/{uuid}/events, Server-Sent
Events: trainctl.serve.events), and every run's latest values for Prometheus (/metrics)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from trainctl.launch.rundir import RUN_FILE
from trainctl.serve.events import Cursor, RunStream
from trainctl.serve.reading import as_columns, as_rows, read_run_metrics
from trainctl.serve.routes.common import Fast, Srv, Uuid, answers
from trainctl.serve.views import pending_row

router = APIRouter(tags=["metrics"])
CURSOR = "ATTEMPT.METRICS_OFFSET.LOG_OFFSET: where the history ends; the stream starts there"


class MetricRow(BaseModel):
    """One step: {"step": N, "<metric>": value, ...} (NaN and infinities are null)."""

    model_config = ConfigDict(extra="allow")
    step: int


class MetricColumns(BaseModel):
    steps: list[int]
    metrics: dict[str, list[float | None]] = Field(description="per metric, a value (or null) per step")
    cursor: str = Field(description=CURSOR)


EVENTS = """Server-Sent Events, each with an `id:` (the cursor: a reconnect's Last-Event-ID resumes after it, nothing
twice, nothing skipped): `status` (the job's status: created, running, done, ...), `progress` (steps, ETA), `metrics`
(new steps as columns: {"steps": [...], "metrics": {...}}), `log` (new lines), `alert`, `attempt` (a resume's new
attempt), `gone` (the run folder was deleted). A job created and not started streams its status, then its run from its
first line once it starts."""


@router.get(
    "/api/jobs/{uuid}/metrics",
    summary='metric history: [{"step": N, "<metric>": value}]; ?since=STEP for what is new',
    responses={
        200: {
            "model": list[MetricRow] | MetricColumns,
            "description": "rows (the cursor in X-Trainctl-Cursor), or ?format=columns",
            "headers": {"X-Trainctl-Cursor": {"description": CURSOR, "schema": {"type": "string"}}},
        },
        **answers(404, 422),
    },
)
def job_metrics(
    uuid: Uuid,
    server: Srv,
    since: Annotated[int | None, Query(description="only steps after this one")] = None,
    keys: Annotated[str | None, Query(description="comma-separated metric names (default: all)")] = None,
    format: Annotated[Literal["rows", "columns"], Query(description="columns: what charts read")] = "rows",
) -> Fast:
    found = server.job_of(uuid)
    if found.pending is not None:  # created, not started: no history yet; the stream starts at its beginning
        steps, cursor = {}, str(Cursor(0, 0, None))
    else:
        m = read_run_metrics(found.path)
        steps, cursor = m.steps, str(Cursor(m.attempt, m.offset, None))
    wanted = [k for k in keys.split(",") if k] if keys else None
    if format == "columns":
        return Fast({**as_columns(steps, wanted, since), "cursor": cursor})
    return Fast(as_rows(steps, wanted, since), headers={"X-Trainctl-Cursor": cursor})


@router.get(
    "/api/jobs/{uuid}/events",
    summary="SSE: metrics, status, progress, alerts, log lines; the event id is the file offsets",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {"schema": {"type": "string"}}}, "description": EVENTS},
               **answers(404)},
)  # fmt: skip
async def job_events(
    uuid: Uuid,
    request: Request,
    server: Srv,
    cursor: Annotated[str | None, Query(description="where to start: the cursor /metrics answered")] = None,
) -> StreamingResponse:
    found = server.job_of(uuid)
    store, root, path = server.store, found.root, found.path
    key = found.pending["uuid"] if found.pending is not None else None

    def status() -> dict:
        if (path / RUN_FILE).is_file():
            return store.entry(root, path).row()
        job = store.pending_job(key) if key else None
        return pending_row(job) if job else {"status": "created"}

    def waiting() -> bool:
        """Created and not started yet: the stream waits for its run folder instead of saying it is gone."""
        return key is not None and store.pending_job(key) is not None

    last = request.headers.get("last-event-id")
    start = Cursor.parse(last) or Cursor.parse(cursor)
    stream = RunStream(path, status, start, resumed=bool(Cursor.parse(last)), waiting=waiting)
    return StreamingResponse(
        stream.events(request.is_disconnected),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


@router.get(
    "/metrics",
    tags=["prometheus"],
    summary="Prometheus exposition of the runs and GPUs",
    response_class=Response,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                     "description": "the Prometheus text format (version 1.0.0; promtool check metrics passes)"}},
)  # fmt: skip
def prometheus(server: Srv) -> Response:
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    if server.registry is None:
        from trainctl.serve.prom import registry

        server.registry = registry(server.store, server.config.gpus)
    return Response(generate_latest(server.registry), media_type=CONTENT_TYPE_LATEST)
