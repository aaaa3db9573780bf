"""What the routers share: the server's state (a route takes `server: Srv`), the JSON response, the error body every
4xx answer carries, the answers routes document, and the lookup of a job (a run, or a job created and not started)
by uuid or name."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, get_args

import orjson
from fastapi import Depends, Request
from fastapi import Path as PathParam
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, model_validator

from trainctl.serve import jobs
from trainctl.serve.security import Secrets
from trainctl.serve.store import Located, RunStore


@dataclass
class ServeConfig:
    roots: list[Path]
    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = None
    allow_actions: bool = False
    allow_hosts: list[str] = field(default_factory=list)
    gpus: object = None  # a callable returning GpuStat items (tests); None: NVML


@dataclass
class Server:
    """What every route reads: app.state.server, handed to a route by FastAPI (`server: Srv`)."""

    config: ServeConfig
    store: RunStore
    secrets: Secrets
    actions: jobs.Actions
    registry: Any = None  # Prometheus' collector registry, made on the first scrape

    def job_of(self, key: str) -> Located:
        """A run, or a job created and not started yet, by uuid or name; 404 otherwise."""
        found = self.store.locate(key)
        if found is None:
            raise jobs.ActionError(f"no run or job {key}.", 404, hint="GET /api/jobs lists them")
        return found

    def started(self, key: str, doing: str) -> tuple[Path, Path]:
        """(root, run folder) of a job that has started; 409 for a created one, 404 for none."""
        found = self.job_of(key)
        if found.pending is not None:
            raise jobs.ActionError(
                f"job {found.pending.get('name') or key} is created, not started: nothing to {doing}.",
                409,
                hint=f"POST /api/jobs/{found.pending['uuid']}/start starts it",
            )
        return found.root, found.path


def _server(request: Request) -> Server:
    return request.app.state.server


Srv = Annotated[Server, Depends(_server)]
# the path parameter naming a job
Uuid = Annotated[str, PathParam(description="a job's uuid, or its run folder's name")]


def need_actions(request: Request) -> None:
    """A dependency of every route that changes something: 403 before anything else is read, unless the server
    was started with --allow-actions."""
    if not request.app.state.server.config.allow_actions:
        raise jobs.ActionError(
            "actions are off on this server.",
            403,
            hint="start it with --allow-actions to create, start, stop and resume jobs and to merge, evaluate "
            "and prune checkpoints",
        )


class Fast(Response):
    """JSON through orjson (a 10k-step history in milliseconds); NaN and infinities become null."""

    media_type = "application/json"

    def render(self, content) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_NON_STR_KEYS, default=str)


class ApiError(BaseModel):
    """Every 4xx answer of the API (and its 500 when a planner fails): what is wrong, how to fix it, the details."""

    model_config = ConfigDict(extra="allow")
    error: str = Field(description="what is wrong, in one sentence")
    hint: str | None = Field(None, description="how to fix it: a command, a request")
    details: list[str] | None = Field(None, description="one line per problem (the fields a request got wrong)")


# what each status code means on this API; answers(...) puts them in a route's `responses`
MEANINGS = {
    400: "the body could not be read (it is not UTF-8)",
    401: "a token is needed: Authorization: Bearer TOKEN, or the login page's cookie",
    403: "actions are off on this server (start it with --allow-actions), or a POST from another origin",
    404: "no run or job with this uuid or folder name (GET /api/jobs lists them), or no such step",
    409: "the job's state does not allow this (started already, running, not running, planned with problems, "
    "no checkpoints yet, a merge of it running)",
    413: "the file is too big to serve",
    415: "a POST must carry a JSON body (Content-Type: application/json)",
    422: "the request does not match this document, or its values cannot be used for this job (an override its "
    "config does not take, a metric it does not log)",
    500: "the planner failed",
}


def answers(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {c: {"model": ApiError, "description": MEANINGS[c]} for c in codes}


class Body(BaseModel):
    """A request body: every field it takes declared, and its numbers JSON numbers as /openapi.json says (an integer
    may be written 4.0), never a bool or a string (pydantic's lax mode reads `false` as 0.0 and "2" as 2)."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _numbers(cls, data):
        if isinstance(data, dict):
            for name, field in cls.model_fields.items():
                numeric = {int, float} & {field.annotation, *get_args(field.annotation)}
                if numeric and isinstance(data.get(name), bool | str):
                    raise ValueError(f"{name}: a JSON number is needed, not {json.dumps(data[name])[:40]}")
        return data


# every route that changes something: off without --allow-actions (403), a JSON body (415)
ACTION = [Depends(need_actions)]
ACTION_ANSWERS = answers(400, 403, 415, 422)


def links(status: int, value: str, *operations: str, param: str = "uuid") -> dict:
    """`openapi_extra` for a route whose answer names what other operations take (OpenAPI links: an API tester
    follows them from one answer to the next request): `value` is where, e.g. "$response.body#/uuid"."""
    found = {op: {"operationId": op, "parameters": {param: value}} for op in operations}
    return {"responses": {str(status): {"links": found}}}
