"""Liveness, readiness and Prometheus metrics (no token: scraped by infrastructure)."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from podfleet.api.deps import StorePing
from podfleet.api.schemas import Liveness, Readiness
from podfleet.control.logbuf import rfc3339
from podfleet.engine.timeline import Timeline
from podfleet.store.election import Role

router = APIRouter(tags=["system"])


@router.get("/healthz", operation_id="Healthz", response_model=Liveness,
             response_model_exclude_unset=True)
async def healthz(request: Request) -> dict[str, object]:
    """Liveness: the process answers (whatever the database does), and which role it has."""
    plane = request.app.state.plane
    lead = request.app.state.leadership
    leads = lead.role == Role.LEADER
    out: dict[str, object] = {
        "ok": True, "role": lead.role.value, "instance": lead.holder, "term": lead.term if leads else None,
        "leader": lead.leader_url(), "clusters": len(plane.clusters) if leads and lead.reloaded else None,
        "timeline_s": round(plane.tl.now, 3), "time": rfc3339(time.time()), "speed": plane.tl.speed,
        # A leader that listens while its engine reloads the store: /v1 answers 503 until then.
        "starting": leads and not lead.reloaded}
    twin = twin_time(plane.tl)
    if twin is not None:
        out["twin_time"] = twin
    return out


def twin_time(tl: Timeline) -> str | None:
    """The twin's own clock on a sped-up plane (RFC 3339): the wall-clock instant of timeline
    0 plus the timeline seconds since, so at 20x it runs 20 times faster than the wall
    clock every other timestamp shows. None at speed 1 (it would be the wall clock) and in
    virtual time (no served clock to stand beside)."""
    if tl.speed is None or tl.speed == 1.0:
        return None
    return rfc3339(tl.wall_at(0.0) + tl.now)


@router.get("/readyz", operation_id="Readyz", response_class=JSONResponse,
            responses={200: {"model": Readiness}})
def readyz(request: Request, store_ping: StorePing) -> JSONResponse:
    """Readiness: 200 when this server can answer the API now (the database answers, and it
    leads or knows a leader to forward to), else 503 with the reason."""
    lead = request.app.state.leadership
    store_ok = store_ping()
    leads = lead.role == Role.LEADER
    why = None if store_ok else "the store does not answer"
    if why is None and leads and not lead.reloaded:
        why = "starting: the engine is reloading the store"
    if why is None and not leads and lead.leader_url() is None:
        why = "no leader is known yet"
    body = {"ready": why is None, "role": lead.role.value, "store": "ok" if store_ok else "unreachable",
            "leader": lead.leader_url()}
    if why is not None:
        body["reason"] = why
    return JSONResponse(body, status_code=200 if why is None else 503,
                        headers=None if why is None else {"Retry-After": "2"})


@router.get("/metrics", operation_id="Metrics", response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
