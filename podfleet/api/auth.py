"""Bearer-token authentication and the one authorization table (operationId -> role).

Every ``/v1`` route runs ``authorize``: it reads the route's operationId, finds the
caller's token by its hash, and checks the role against ``RULES``. An operation missing
from ``RULES`` is denied (fail closed); the test suite derives its table from
``/openapi.json``, so a new endpoint without a rule fails it. Every denied call is
audited through the engine.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from podfleet.errors import AuthError, ForbiddenError
from podfleet.security.tokens import Role, hash_token
from podfleet.store.protocol import StoreProtocol

RULES: dict[str, Role] = {
    "ListClusters": Role.VIEWER,
    "DescribeCluster": Role.VIEWER,
    "DescribeClusterHardware": Role.VIEWER,
    "GetClusterLogs": Role.VIEWER,
    "ListTrainingJobs": Role.VIEWER,
    "DescribeTrainingJob": Role.VIEWER,
    "GetJobLogs": Role.VIEWER,
    "PlanParallelism": Role.VIEWER,
    "CreateTrainiumCluster": Role.OPERATOR,
    "DeleteCluster": Role.OPERATOR,
    "SubmitTrainingJob": Role.OPERATOR,
    "StopTrainingJob": Role.OPERATOR,
    "InjectFault": Role.OPERATOR,
    "ListAlerts": Role.VIEWER,
    "GetTelemetry": Role.VIEWER,
    "ListRecoveries": Role.VIEWER,
    "ListFirmwareUpdates": Role.VIEWER,
    "DescribeFirmwareUpdate": Role.VIEWER,
    "AcknowledgeAlert": Role.OPERATOR,
    "StartFirmwareUpdate": Role.OPERATOR,
    "ListAuditEvents": Role.ADMIN,
    "VerifyAuditChain": Role.ADMIN,
    "CreateAccessToken": Role.ADMIN,
    "ListAccessTokens": Role.ADMIN,
    "RevokeAccessToken": Role.ADMIN,
}


@dataclass(frozen=True)
class Principal:
    id: str
    name: str
    role: Role

    @property
    def actor(self) -> str:
        return f"{self.id}:{self.name}"


class TokenCache:
    """Token hash -> principal, for a few seconds: a store read per request would
    dominate a snapshot read. Revocation takes effect within ``ttl_s``."""

    def __init__(self, store: StoreProtocol, ttl_s: float = 5.0) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self._hits: dict[str, tuple[Principal | None, float]] = {}

    def lookup(self, token: str) -> Principal | None:
        h = hash_token(token)
        now = time.monotonic()
        hit = self._hits.get(h)
        if hit is not None and hit[1] > now:
            return hit[0]
        rec = self.store.find_token_by_hash(h)
        p = None if rec is None or rec.revoked else Principal(rec.id, rec.name, Role.parse(rec.role))
        if len(self._hits) > 10_000:
            self._hits.clear()
        self._hits[h] = (p, now + self.ttl_s)
        return p

    def forget(self, token_id: str) -> None:
        """Drop a revoked token from this process's cache at once (other processes
        sharing the store still honour it for up to ``ttl_s``)."""
        for h, (p, _) in list(self._hits.items()):
            if p is not None and p.id == token_id:
                del self._hits[h]


async def authorize(request: Request) -> Principal:
    route = request.scope.get("route")
    op = getattr(route, "operation_id", None) or "unknown"
    plane = request.app.state.plane
    target = "/".join(str(v) for v in request.path_params.values())
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    principal = request.app.state.tokens.lookup(token.strip()) if scheme.lower() == "bearer" and token.strip() else None
    if principal is None:
        why = "missing bearer token" if not header else "invalid or revoked token"
        await plane.call(plane.audit, "anonymous", op, target, "denied", {"reason": why})
        raise AuthError(f"{why}: send 'Authorization: Bearer <token>'")
    required = RULES.get(op)
    if required is None or not principal.role.allows(required):
        need = required.value if required else "a rule (none defined: denied)"
        await plane.call(plane.audit, principal.actor, op, target, "denied",
                         {"role": principal.role.value, "required": need})
        raise ForbiddenError(f"role {principal.role.value} may not {op} (needs {need})",
                             allowed=[r.value for r in Role if required and r.allows(required)])
    request.state.principal = principal
    return principal


CurrentPrincipal = Annotated[Principal, Depends(authorize)]
