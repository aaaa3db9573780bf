"""Runs side by side, as `trainctl runs compare` shows them: the config keys that differ, the last metrics."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from trainctl.serve.routes.common import Fast, Srv, answers
from trainctl.serve.views import comparison

router = APIRouter(tags=["runs"])
# two keys or more, comma-separated (empty ones between commas are skipped): what the schema promises is what
# the route accepts
TWO_OR_MORE = r"^,*[^,]+(,+[^,]+)+,*$"


class Comparison(BaseModel):
    runs: list[dict] = Field(description="uuid, name, algorithm, status of each, in the order asked")
    differ: dict[str, list] = Field(description="the config keys whose values differ: a value per run")
    by_name: list[str] = Field(description="the keys that differ only as the runs' names do")
    same: int = Field(description="how many keys are the same in every run")
    metrics: dict[str, list] = Field(description="each metric's last value, per run")


@router.get("/api/compare", summary="runs side by side: the config keys that differ, metrics",
            responses={200: {"model": Comparison}, **answers(404, 422)})  # fmt: skip
def compare_runs(
    server: Srv,
    runs: Annotated[str, Query(description="comma-separated uuids or names (2 or more)", pattern=TWO_OR_MORE)],
) -> Fast:
    return Fast(comparison(server.store, [k for k in runs.split(",") if k]))
