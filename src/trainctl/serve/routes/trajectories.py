"""An RL or agent run's trajectories (the rollouts verl dumps per step) as turns: per step, one step's, one
prompt's across steps; filtered by reward, tool errors and prompt."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from trainctl.serve.routes.common import Fast, Srv, Uuid, answers

router = APIRouter(tags=["trajectories"])


class StepSummary(BaseModel):
    step: int
    trajectories: int
    mean_reward: float | None
    tool_calls: int
    with_errors: int = Field(description="trajectories with a tool error or a malformed call")


class Trajectory(BaseModel):
    """One sampled response as turns (assistant, tool), with the prompt, the reward and the tool errors."""

    model_config = ConfigDict(extra="allow")
    index: int
    step: int | None
    prompt: str
    prompt_key: str = Field(description="the prompt's key: GET /api/jobs/{uuid}/prompts/{key}")
    turns: list[dict]
    reward: float | None
    tool_calls: int
    tool_errors: int


@router.get("/api/jobs/{uuid}/rollouts", summary="the steps with trajectories",
            responses={200: {"model": list[StepSummary]}, **answers(404)})  # fmt: skip
def job_rollouts(uuid: Uuid, server: Srv) -> Fast:
    from trainctl.serve.trajectories import step_summary

    found = server.job_of(uuid)
    return Fast([] if found.pending is not None else step_summary(found.path))


@router.get("/api/jobs/{uuid}/rollouts/{step}",
            summary="one step's trajectories as turns; filter by reward, tool errors, prompt",
            responses={200: {"model": list[Trajectory]}, **answers(404, 422)})  # fmt: skip
def job_rollout_step(
    uuid: Uuid,
    step: int,
    server: Srv,
    min_reward: Annotated[float | None, Query(description="rewards from this one up")] = None,
    max_reward: Annotated[float | None, Query(description="rewards up to this one")] = None,
    errors: Annotated[Literal["only", "none"] | None, Query(description="only: with tool errors; none: without")] = (
        None
    ),
    prompt: Annotated[str | None, Query(description="a prompt's key")] = None,
) -> Fast:
    from trainctl.serve.trajectories import read_step, select

    found = server.job_of(uuid)
    if found.pending is not None:
        return Fast([])
    return Fast(select(read_step(found.path, step), min_reward, max_reward, errors, prompt))


@router.get("/api/jobs/{uuid}/prompts/{key}", summary="one prompt's trajectories, every step",
            responses={200: {"model": list[Trajectory]}, **answers(404)})  # fmt: skip
def job_prompt(uuid: Uuid, key: str, server: Srv) -> Fast:
    from trainctl.serve.trajectories import read_step, select, steps

    found = server.job_of(uuid)
    if found.pending is not None:
        return Fast([])
    return Fast([t for s in steps(found.path) for t in select(read_step(found.path, s), prompt=key)])
