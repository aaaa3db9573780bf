"""A job's checkpoints and the tools for them: list (`ckpt ls` with the scores `trainctl eval` wrote), merge and
evaluate in the background (/api/actions/{id} follows one), prune (shown first, then deleted exactly as shown)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter
from fastapi import Path as PathParam
from pydantic import BaseModel, ConfigDict, Field

from trainctl.serve import jobs
from trainctl.serve.routes.common import ACTION, ACTION_ANSWERS, Body, Fast, Srv, Uuid, answers, links
from trainctl.serve.views import checkpoints, trainctl_value

router = APIRouter(tags=["checkpoints"])
# a merge or eval started: GET /api/actions/{id} follows it
FOLLOW = links(202, "$response.body#/id", "action", param="aid")


class MergeBody(Body):
    step: int
    dtype: Literal["auto", "bf16", "fp16", "fp32"] = "auto"
    part: Literal["actor", "critic"] | None = None


class EvalBody(Body):
    step: int
    split: Literal["test", "train"] = "test"
    limit: int | None = Field(None, ge=1)


class PruneBody(Body):
    keep_last: int = Field(..., ge=1)
    keep_best: str | None = None
    mode: Literal["min", "max"] | None = None
    confirm: list[str] | None = Field(None, description="the paths the preview showed: deletes exactly those")


class CheckpointRow(BaseModel):
    model_config = ConfigDict(extra="allow")
    step: int
    path: str = Field(description="relative to the run folder")
    eval_results: dict[str, float | None] = Field(description="what `trainctl eval` scored it")
    metrics: dict[str, float | None] = Field(description="what the run logged at its step")
    latest: bool


class ActionState(BaseModel):
    """A merge or an eval the server started; its record stays in the run folder (logs/serve-KIND-*.json), so a
    server started later still shows how it ended."""

    id: str
    kind: Literal["merge", "eval"]
    run: str
    command: str
    state: Literal["running", "done", "failed"]
    exit_code: int | None
    reason: str | None = Field(description="why it failed without an exit status, or how it was stopped")
    started: float
    ended: float | None
    log: str = Field(description="its log, in the run's logs/")
    output: list[str] = Field(description="the log's last lines")


class Pruned(BaseModel):
    keep: list[dict]
    delete: list[dict]
    freed: int
    deleted: bool


@router.get("/api/jobs/{uuid}/checkpoints", summary="`ckpt ls` with the scores `trainctl eval` wrote",
            responses={200: {"model": list[CheckpointRow]}, **answers(404)})  # fmt: skip
def job_checkpoints(uuid: Uuid, server: Srv) -> Fast:
    found = server.job_of(uuid)
    return Fast([] if found.pending is not None else checkpoints(found.path))


@router.post("/api/jobs/{uuid}/checkpoints/merge", summary="trainctl ckpt merge STEP, in the background",
             status_code=202, dependencies=ACTION, openapi_extra=FOLLOW,
             responses={202: {"model": ActionState}, **ACTION_ANSWERS, **answers(404, 409)})  # fmt: skip
def merge(uuid: Uuid, body: MergeBody, server: Srv) -> Fast:
    _, path = server.started(uuid, "merge")
    target = jobs.checkpoint_path(path, body.step)
    args = ["ckpt", "merge", str(target), "--dtype", body.dtype, *(["--part", body.part] if body.part else [])]
    return Fast(server.actions.run("merge", path, args).data(), status_code=202)


@router.post("/api/jobs/{uuid}/checkpoints/eval",
             summary="trainctl eval STEP on a split, in the background (scores land in eval/)",
             status_code=202, dependencies=ACTION, openapi_extra=FOLLOW,
             responses={202: {"model": ActionState}, **ACTION_ANSWERS, **answers(404, 409)})  # fmt: skip
def evaluate(uuid: Uuid, body: EvalBody, server: Srv) -> Fast:
    _, path = server.started(uuid, "evaluate")
    target = jobs.checkpoint_path(path, body.step)
    args = ["eval", str(target), *(["--limit", str(body.limit)] if body.limit else [])]
    if body.split == "train":
        train = trainctl_value(path, ("data", "train_files"))
        if not train:
            raise jobs.ActionError(f"{path.name} names no training file.", 422)
        args.append(f"data.val_files={train}")
    return Fast(server.actions.run("eval", path, args).data(), status_code=202)


@router.post("/api/jobs/{uuid}/checkpoints/prune",
             summary="what pruning would delete; with confirm (the paths shown), deletes exactly those",
             dependencies=ACTION,
             responses={200: {"model": Pruned}, **ACTION_ANSWERS, **answers(404, 409)})  # fmt: skip
def prune(uuid: Uuid, body: PruneBody, server: Srv) -> Fast:
    _, path = server.started(uuid, "prune")
    return Fast(jobs.prune(path, body.keep_last, body.keep_best, body.mode, body.confirm))


@router.get("/api/jobs/{uuid}/actions", summary="the merges and evals started on a job, newest first",
            responses={200: {"model": list[ActionState]}, **answers(404)})  # fmt: skip
def job_actions(uuid: Uuid, server: Srv) -> Fast:
    found = server.job_of(uuid)
    return Fast([] if found.pending is not None else [a.data() for a in server.actions.of(found.path)])


@router.get("/api/actions/{aid}", summary="a merge or eval the server (or an earlier one) started",
            responses={200: {"model": ActionState}, **answers(404)})  # fmt: skip
def action(aid: Annotated[str, PathParam(description="its id (12 hex digits)")], server: Srv) -> Fast:
    found = server.actions.get(aid)
    if found is None:
        raise jobs.ActionError(f"no action {aid}.", 404, hint="GET /api/jobs/UUID/actions lists a job's")
    return Fast(found.data())
