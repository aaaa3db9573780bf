"""What the machine and trainctl offer: the GPUs (NVML) and the config groups and recipes a job can choose."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from trainctl.serve.routes.common import Fast, Srv
from trainctl.serve.views import gpu_data

router = APIRouter()


class Gpu(BaseModel):
    index: int
    name: str
    utilization: int = Field(description="percent")
    memory_used: int = Field(description="bytes")
    memory_total: int = Field(description="bytes")
    temperature: int | None = Field(description="degrees Celsius")
    power_watts: float | None


class Gpus(BaseModel):
    available: bool
    reason: str | None = Field(description="why there is none (no NVIDIA driver, no nvidia-ml-py)")
    gpus: list[Gpu]


class Groups(BaseModel):
    groups: dict[str, list[str]] = Field(description="each config group's options (recipe, model, data, ...)")
    actions: bool = Field(description="whether this server may launch jobs (--allow-actions)")


@router.get("/api/gpus", tags=["gpus"], summary="utilisation, memory, temperature, power per GPU (NVML)",
            responses={200: {"model": Gpus}})  # fmt: skip
def gpus(server: Srv) -> Fast:
    return Fast(gpu_data(server.config.gpus))


@router.get("/api/groups", tags=["launch"], summary="the config groups and their options, the recipes",
            responses={200: {"model": Groups}})  # fmt: skip
def groups(server: Srv) -> Fast:
    from trainctl.config.search import GROUPS, SearchPath

    search = SearchPath.default()
    return Fast({"groups": {g: list(search.options(g)) for g in GROUPS}, "actions": server.config.allow_actions})
