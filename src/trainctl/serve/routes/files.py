"""A text file of a run folder (logs, configs, JSONL), as text; nothing outside the run folders (safe_path)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse

from trainctl.serve.jobs import ActionError
from trainctl.serve.routes.common import ApiError, Srv, Uuid
from trainctl.serve.security import safe_path

router = APIRouter(tags=["files"])
# files served from run folders are text (logs, configs, JSONL), at most this big (a whole log: `trainctl runs logs`)
MAX_FILE_BYTES = 32 << 20
TEXT_SUFFIXES = {".log", ".txt", ".json", ".jsonl", ".yaml", ".yml", ".sh", ".md", ".csv", ".py"}


@router.get(
    "/files/{uuid}/{path:path}",
    summary="a text file of a run folder (logs, configs)",
    response_class=PlainTextResponse,
    responses={
        200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "the file, as text"},
        404: {"model": ApiError, "description": "no such run, or no text file there (or a path out of the run)"},
        413: {"model": ApiError, "description": f"the file is over {MAX_FILE_BYTES >> 20} MB"},
    },
)
def run_file(uuid: Uuid, path: str, request: Request, server: Srv) -> PlainTextResponse:
    found = server.store.find(uuid)
    target = safe_path(found[1], path, request.scope.get("raw_path", b"").split(b"/", 3)[-1]) if found else None
    if target is None or not target.is_file() or target.suffix not in TEXT_SUFFIXES:
        raise ActionError(f"no text file {path} in run {uuid}.", 404, hint=f"GET /api/jobs/{uuid} names its files")
    if target.stat().st_size > MAX_FILE_BYTES:
        hint = "read it with trainctl runs logs, or on the machine"
        raise ActionError(f"{target.name} is over {MAX_FILE_BYTES >> 20} MB.", 413, hint=hint)
    return PlainTextResponse(Path(target).read_text(errors="replace"))
