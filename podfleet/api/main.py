"""Builds the FastAPI app around a ControlPlane (nothing else lives here)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request

from podfleet.api import problems
from podfleet.api.auth import TokenCache, authorize
from podfleet.api.metrics import ApiMetrics, MetricsMiddleware
from podfleet.api.routes import audit, clusters, health, jobs, plan, system, tokens
from podfleet.api.schemas import Problem
from podfleet.control.plane import ControlPlane
from podfleet.health.metrics import HealthCollector
from podfleet.health.service import HealthService

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": Problem, "content": {"application/problem+json": {}}} for code in (400, 401, 403, 404, 409, 422)
}


def create_app(plane: ControlPlane, health_service: HealthService | None = None) -> FastAPI:
    app = FastAPI(
        title="podfleet", version="0.1.0",
        description="Control plane for AI-training pods. Every /v1 call needs `Authorization: Bearer <token>`.",
    )
    app.state.plane = plane
    app.state.health = health_service  # alerts, telemetry, recoveries, firmware (None: answered with 409)
    app.state.tokens = TokenCache(plane.store)
    app.state.metrics = metrics = ApiMetrics(plane)
    metrics.registry.register(HealthCollector(plane, health_service))

    async def on_invalid(request: Request, detail: str) -> None:
        # Rejected writes are audited too (reads are not: they change nothing).
        principal = getattr(request.state, "principal", None)
        route = request.scope.get("route")
        if principal is not None and request.method not in ("GET", "HEAD"):
            await plane.call(plane.audit, principal.actor, getattr(route, "operation_id", "unknown"),
                             "/".join(str(v) for v in request.path_params.values()),
                             "error:invalid-input", {"message": detail})

    app.state.on_invalid = on_invalid
    problems.install(app)
    v1 = APIRouter(dependencies=[Depends(authorize)], responses=ERRORS)
    for module in (clusters, jobs, plan, audit, health, tokens):
        v1.include_router(module.router)
    app.include_router(v1)
    app.include_router(system.router)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    return app
