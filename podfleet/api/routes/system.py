"""Liveness and Prometheus metrics (no token: scraped by infrastructure)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

router = APIRouter(tags=["system"])


@router.get("/healthz", operation_id="Healthz")
async def healthz(request: Request) -> dict[str, object]:
    plane = request.app.state.plane
    return {"ok": True, "clusters": len(plane.clusters), "timeline_s": round(plane.tl.now, 3)}


@router.get("/metrics", operation_id="Metrics", response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
