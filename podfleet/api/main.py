"""Builds the FastAPI app around a ControlPlane (nothing else lives here)."""

from __future__ import annotations

import socket
from typing import Any

from fastapi import Depends, FastAPI, Request
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from podfleet.advisor import reports
from podfleet.api import openapi, problems
from podfleet.api.auth import TokenCache, UserCache, authorize
from podfleet.api.chip_metrics import rolled_up_ids
from podfleet.api.guard import Guard, GuardConfig
from podfleet.api.leadership import LeaderCollector, LeaderGate, Leadership, Sole
from podfleet.api.metrics import ApiMetrics, MetricsMiddleware
from podfleet.api.routes import audit, chips, clusters, health, jobs, plan, system, tokens
from podfleet.api.routes import code as code_routes
from podfleet.api.routes import keys as key_routes
from podfleet.api.routes import maintenance as maintenance_routes
from podfleet.api.routes import ops as ops_routes
from podfleet.api.routes import queues as queue_routes
from podfleet.api.routes import reservations as reservation_routes
from podfleet.api.routes import usage as usage_routes
from podfleet.api.routes import users as user_routes
from podfleet.api.schemas import Problem
from podfleet.api.usage_metrics import UsageCollector
from podfleet.api.wirecase import WireCase
from podfleet.control.plane import ControlPlane
from podfleet.health.metrics import HealthCollector
from podfleet.health.service import HealthService
from podfleet.recovery.maintenanceservice import MaintenanceService
from podfleet.recovery.rollouts import FirmwareService
from podfleet.recovery.service import RecoveryService
from podfleet.security.ratelimit import DenialLog, TokenBuckets

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": Problem, "content": {"application/problem+json": {}}} for code in (400, 401, 403, 404, 409, 422)
}


def create_app(plane: ControlPlane, health_service: HealthService | None = None,
               guard: GuardConfig | None = None, *, recovery: RecoveryService | None = None,
               firmware: FirmwareService | None = None, maintenance: MaintenanceService | None = None,
               leadership: Leadership | None = None,
               metrics_per_chip: bool = False) -> FastAPI:
    """The app over the parts ``compose.build`` made (``recovery``: ListRecoveries;
    ``firmware``: rollouts; ``maintenance``: maintenance rollouts); a part left out is answered with 409, never a 500.
    ``leadership``: the election among servers sharing the store (default: this one leads)."""
    app = FastAPI(
        title="podfleet", version="0.1.0",
        description="Control plane for AI-training pods. Every /v1 call needs `Authorization: Bearer <token>`.",
    )
    app.state.plane = plane
    app.state.health = health_service  # alerts, telemetry (None: answered with 409)
    app.state.recovery = recovery  # ListRecoveries
    app.state.firmware = firmware  # firmware rollouts
    app.state.maintenance = maintenance  # maintenance rollouts
    app.state.tokens = TokenCache(plane.store)
    # The routes reach the store only through these ports (deps.Audit, deps.StorePing).
    app.state.audit_log = plane.store
    app.state.store_ping = plane.store.ping
    app.state.user_reader = plane.store  # deps.Users
    guard = guard or GuardConfig()
    app.state.denials = DenialLog(guard.denial_window_s)
    # Failed authentications per client address: the guard's and the console sign-in's.
    app.state.auth_failures = TokenBuckets(guard.auth_fail_rate_per_s, guard.auth_fail_burst)
    app.state.audit_trail = None  # signed digests to verify against (set by ``podfleet up``)
    app.state.users = UserCache(plane.store)
    app.state.reports = reports.StoredReports(plane.store)  # default retention; ``podfleet up`` sets its own
    app.state.mfa_key = None  # seals TOTP secrets (set by ``podfleet up`` from the key provider)
    app.state.leadership = leadership = leadership or Sole(socket.gethostname())
    app.state.metrics = metrics = ApiMetrics(plane, per_chip=metrics_per_chip)
    metrics.registry.register(LeaderCollector(leadership))  # podfleet_leader{server}, its term
    metrics.registry.register(HealthCollector(plane, health_service, recovery,
                                              rolled_up=lambda rts: rolled_up_ids(rts, metrics_per_chip)))
    metrics.registry.register(UsageCollector(plane))  # podfleet_chip_seconds_total

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
    # Each resource's routes straight into the app, with the token check and the error
    # answers: FastAPI rebuilds every route each time a router is included, and that
    # (pydantic schemas per parameter) is the largest part of a server's start-up.
    for module in (clusters, chips, jobs, plan, audit, health, tokens, code_routes, ops_routes, user_routes,
                   key_routes, queue_routes, reservation_routes, usage_routes, maintenance_routes):
        app.include_router(module.router, dependencies=[Depends(authorize)], responses=ERRORS)
    app.include_router(system.router)
    openapi.install(app)  # links between operations (stateful clients, schemathesis)
    # Innermost: renames deprecated query names as the routes see them, and marks the
    # response of any request that used an old spelling (its body's are noted while validating).
    app.add_middleware(WireCase)
    # Added before metrics, so it runs inside them: refused requests are counted too.
    app.add_middleware(Guard, config=guard)
    # Outside the guard: a follower forwards /v1 as it came, and the leader's guard judges it.
    app.add_middleware(LeaderGate, leadership=leadership)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    if guard.trusted_proxies:  # outside the guard: the client it limits is the one the proxy names
        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=list(guard.trusted_proxies))
    return app
