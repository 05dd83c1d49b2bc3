"""Code artifacts: ``podfleet code push DIR`` uploads a gzipped tarball of a directory;
jobs then run ``code:<sha256>/<path>`` from it (``security/code.py``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from podfleet.api.auth import CurrentPrincipal
from podfleet.api.deps import Plane
from podfleet.api.schemas import CodeArtifact
from podfleet.control.workdir import code_root
from podfleet.errors import PodfleetError
from podfleet.security.code import store_artifact

router = APIRouter(prefix="/v1/code", tags=["code"])


@router.post("", operation_id="UploadCode", status_code=201, response_model=CodeArtifact,
             response_model_exclude_unset=True,
             openapi_extra={"requestBody": {"required": True, "content": {
                 # The same bytes under either type: application/octet-stream is the one
                 # generated clients (and schemathesis) know how to send.
                 "application/gzip": {"schema": {"type": "string", "format": "binary"}},
                 "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}})
async def upload_code(request: Request, plane: Plane, who: CurrentPrincipal) -> dict[str, Any]:
    """Store a gzipped tarball of code, content-addressed; submit jobs with
    ``entrypoint: code:<sha256>/<path>``. The body limit is the server's code limit."""
    data = await request.body()
    try:
        # Unpacking is file I/O: off the event loop and off the engine thread.
        art = await run_in_threadpool(store_artifact, data, code_root(plane.workdir))
    except PodfleetError as exc:
        await plane.call(plane.audit, who.actor, "UploadCode", "code", f"error:{exc.code}",
                         {"bytes": len(data), "message": exc.message})
        raise
    detail = {"digest": art.digest, "bytes": len(data), "files": art.files, "unpacked_bytes": art.bytes,
              "created": art.created}
    await plane.call(plane.audit, who.actor, "UploadCode", f"code:{art.digest}", "ok", detail)
    return {**detail, "ref": art.ref}
