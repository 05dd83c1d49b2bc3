"""Bearer-token authentication and the one authorization table (operationId -> role).

Every ``/v1`` route runs ``authorize``: it reads the route's operationId and checks the
caller's role against ``RULES``. An operation missing from ``RULES`` is denied (fail
closed); the test suite derives its table from ``/openapi.json``, so a new endpoint
without a rule fails it. Authentication itself runs earlier, in the request guard
(``api/guard.py``), before any body is read. Every refused call is audited, aggregated
(``security/ratelimit.DenialLog``) so a flood costs a few rows, not one each.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from starlette.requests import HTTPConnection

from podfleet.control import users
from podfleet.errors import AuthError, ChecksumError, ForbiddenError, InvalidInputError
from podfleet.security.policy import (
    MFA_KEY,
    Policy,
    evaluate,
    names_queues,
    queue_resource,
    resource_of,
    role_policy,
)
from podfleet.security.ratelimit import DenialLog
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
    "GetJobMetrics": Role.VIEWER,
    "PlanParallelism": Role.VIEWER,
    "CreateTrainiumCluster": Role.OPERATOR,
    "DeleteCluster": Role.OPERATOR,
    "SubmitTrainingJob": Role.OPERATOR,
    "StopTrainingJob": Role.OPERATOR,
    # Queues and job arrays (api/routes/queues.py)
    "ListQueues": Role.VIEWER,
    "DescribeQueue": Role.VIEWER,
    "DescribeJobArray": Role.VIEWER,
    "CreateQueue": Role.ADMIN,
    "UpdateQueue": Role.ADMIN,
    "DeleteQueue": Role.ADMIN,
    "StopJobArray": Role.OPERATOR,
    "GetUsage": Role.VIEWER,  # api/routes/usage.py
    "ListPriorityClasses": Role.VIEWER,
    "CreatePriorityClass": Role.ADMIN,
    "DeletePriorityClass": Role.ADMIN,
    "InjectFault": Role.OPERATOR,
    "CordonChip": Role.OPERATOR,
    "DrainChip": Role.OPERATOR,
    "UncordonChip": Role.OPERATOR,
    "RepairChip": Role.OPERATOR,
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
    "UploadCode": Role.OPERATOR,
    # Users, policies, MFA (api/routes/users.py)
    "CreateUser": Role.ADMIN,
    "ListUsers": Role.ADMIN,
    "DescribeUser": Role.ADMIN,
    "PutUserPolicy": Role.ADMIN,
    "DeleteUserPolicy": Role.ADMIN,
    "EnableMfa": Role.ADMIN,
    "RotateKeys": Role.ADMIN,  # api/routes/keys.py
    # Operations intelligence (api/routes/ops.py): verify runs probes and a drill; apply acts.
    "VerifyCluster": Role.OPERATOR,
    "DiagnoseCluster": Role.VIEWER,
    "GetRecommendations": Role.VIEWER,
    "ApplyRecommendation": Role.OPERATOR,
    "ListGuides": Role.VIEWER,
    "GetGuide": Role.VIEWER,
    "CreateHealthReport": Role.OPERATOR,
    "ListHealthReports": Role.VIEWER,
    "GetHealthReport": Role.VIEWER,
}


@dataclass(frozen=True)
class Principal:
    id: str
    name: str
    role: Role

    @property
    def actor(self) -> str:
        return f"{self.id}:{self.name}"


def presented_token(conn: HTTPConnection) -> str | None:
    """The credential this request presents, or None when it presents none. The one
    place that knows where a token may come from (the header, else the console's session
    cookie), so the guard, ``authorize`` and log streams all agree."""
    header = conn.headers.get("authorization")
    if header is None:  # the console's session cookie stands for a token (podfleet.console)
        cookie_auth = getattr(getattr(conn.scope.get("app"), "state", None), "cookie_auth", None)
        return cookie_auth(conn) if cookie_auth is not None else None
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


class TokenCache:
    """Token hash -> principal, for a few seconds: a store read per request would
    dominate a snapshot read. Revocation takes effect within ``ttl_s``."""

    def __init__(self, store: StoreProtocol, ttl_s: float = 5.0) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self._hits: dict[str, tuple[Principal | None, float]] = {}

    @staticmethod
    def hash_of(token: str) -> str:
        return hash_token(token)

    def lookup(self, token: str) -> Principal | None:
        return self.lookup_hash(hash_token(token)) if token else None

    def lookup_hash(self, h: str) -> Principal | None:
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


def client_address(conn: HTTPConnection) -> str:
    return conn.client.host if conn.client else "unknown"


async def deny(app: Any, *, client: str, actor: str, action: str, target: str, detail: dict[str, Any]) -> None:
    """Audit a refusal through the app's ``DenialLog``: the first of its kind in a window
    is written at once, repeats as one summary row, so a flood cannot flood the trail."""
    denials: DenialLog = app.state.denials
    rows = denials.record(client=client, actor=actor, action=action, target=target, detail=detail)
    rows.extend(denials.due_at_most_every(1.0))
    plane = app.state.plane
    for r in rows:
        await plane.call(plane.audit, r.actor, r.action, r.target, "denied", r.detail)


async def flush_denials(app: Any) -> None:
    """Write every pending summary now (shutdown, tests)."""
    plane = app.state.plane
    for r in app.state.denials.flush():
        await plane.call(plane.audit, r.actor, r.action, r.target, "denied", r.detail)


async def authorize(request: Request) -> Principal:
    """The caller (authenticated by the guard before the body was read) may run this
    route's operation, or 403. Fails closed: an operation without a rule is denied."""
    route = request.scope.get("route")
    op = getattr(route, "operation_id", None) or "unknown"
    target = "/".join(str(v) for v in request.path_params.values())
    principal: Principal | None = request.scope.get("state", {}).get("principal")
    if principal is None:  # an app served without the guard: authenticate here
        token = presented_token(request)
        principal = request.app.state.tokens.lookup(token) if token else None
        if principal is None:
            why = "missing bearer token" if token is None else "invalid or revoked token"
            await deny(request.app, client=client_address(request), actor="anonymous", action=op,
                       target=target, detail={"reason": why})
            raise AuthError(f"{why}: send 'Authorization: Bearer <token>'")
    required = RULES.get(op)
    resource = resource_of(request.path_params)
    user_policies = request.app.state.users.policies(principal.name)
    if user_policies is not None:  # a user's token: the user's policies decide, with MFA
        mfa_ok = await _second_factor(request, principal, op, target)
        decision = evaluate(user_policies, op, resource, {MFA_KEY: "true" if mfa_ok else "false"})
        if required is None or not decision.allowed:
            await deny(request.app, client=client_address(request), actor=principal.actor, action=op,
                       target=target, detail={"reason": "not allowed", "user": principal.name,
                                              "decision": decision.describe()})
            hint = "; send a fresh code in X-Podfleet-MFA" if decision.policy == "MFARequired" else ""
            raise ForbiddenError(f"user {principal.name} may not {op} on {resource}: {decision.describe()}{hint}")
        request.state.principal = principal
        return principal
    decision = evaluate([role_policies()[principal.role]], op, resource,
                        {"podfleet:PrincipalRole": principal.role.value})
    if required is None or not decision.allowed:
        need = required.value if required else "a rule (none defined: denied)"
        await deny(request.app, client=client_address(request), actor=principal.actor, action=op, target=target,
                   detail={"reason": "not allowed", "role": principal.role.value, "required": need})
        raise ForbiddenError(f"role {principal.role.value} may not {op} (needs {need})",
                             allowed=[r.value for r in Role if required and r.allows(required)])
    request.state.principal = principal
    return principal


CurrentPrincipal = Annotated[Principal, Depends(authorize)]


async def _second_factor(request: Request, principal: Principal, op: str, target: str) -> bool:
    """Whether this request carries a valid, unused TOTP (or recovery) code for its user."""
    code = request.headers.get("x-podfleet-mfa", "").strip()
    if not code:
        return False
    plane = request.app.state.plane
    try:
        await plane.call(users.check_mfa, plane, principal.name, code, request.app.state.mfa_key or b"")
    except (AuthError, InvalidInputError, ChecksumError) as exc:
        await deny(request.app, client=client_address(request), actor=principal.actor, action=op, target=target,
                   detail={"reason": "mfa rejected"})
        raise AuthError(f"MFA code rejected: {exc.message}") from None
    return True


class UserCache:
    """User name -> its policies (None: no such user), for a few seconds, like tokens."""

    def __init__(self, store: StoreProtocol, ttl_s: float = 5.0) -> None:
        self.store, self.ttl_s = store, ttl_s
        self._hits: dict[str, tuple[list[Policy] | None, float]] = {}

    def policies(self, name: str) -> list[Policy] | None:
        now = time.monotonic()
        hit = self._hits.get(name)
        if hit is not None and hit[1] > now:
            return hit[0]
        u = self.store.get_user(name)
        out = users.policies_of(u) if u is not None else None
        if len(self._hits) > 10_000:
            self._hits.clear()
        self._hits[name] = (out, now + self.ttl_s)
        return out

    def forget(self, name: str) -> None:
        self._hits.pop(name, None)


@functools.cache
def role_policies() -> dict[Role, Policy]:
    """Each role's built-in policy, derived from ``RULES`` (``security/policy.role_policy``)."""
    ranks = {r.value: r.rank for r in Role}
    rules = {op: r.value for op, r in RULES.items()}
    return {r: role_policy(r.value, rules, ranks) for r in Role}

# Job options that move checkpoints or their key out of the cluster's data directory, or
# turn encryption off: an operator's job writes encrypted checkpoints where podfleet puts them.
PRIVILEGED_JOB_OPTIONS = ("checkpoint_dir", "key_file", "encrypt_checkpoints")


def privileged_options(options: object) -> list[str]:
    if not isinstance(options, dict):
        return []
    return [k for k in PRIVILEGED_JOB_OPTIONS
            if k in options and not (k == "encrypt_checkpoints" and options[k] is True)]


async def require_admin_for_options(request: Request, who: Principal, op: str, target: str,
                                    options: object) -> None:
    """403 (audited) unless an admin asks for a privileged job option."""
    used = privileged_options(options)
    if not used or who.role.allows(Role.ADMIN):
        return
    await deny(request.app, client=client_address(request), actor=who.actor, action=op, target=target,
               detail={"reason": "privileged option", "role": who.role.value, "options": used})
    raise ForbiddenError(f"role {who.role.value} may not set {', '.join(used)} (needs admin): checkpoints go "
                         "encrypted under the cluster's data directory; leave these options out",
                         field="options", allowed=[Role.ADMIN.value])


async def require_queue(request: Request, who: Principal, cluster: str, queue: str) -> None:
    """403 (audited) when the caller's user policies name queues for SubmitTrainingJob
    and this job's queue (``queue/CLUSTER/QUEUE``) is not among those they allow."""
    policies = request.app.state.users.policies(who.name)
    if not policies or not names_queues(policies, "SubmitTrainingJob"):
        return
    resource = queue_resource(cluster, queue)
    decision = evaluate(policies, "SubmitTrainingJob", resource, {})
    if decision.allowed:
        return
    await deny(request.app, client=client_address(request), actor=who.actor, action="SubmitTrainingJob",
               target=cluster, detail={"reason": "queue not allowed", "user": who.name, "queue": queue})
    raise ForbiddenError(f"user {who.name} may not SubmitTrainingJob on {resource}: {decision.describe()}",
                         field="queue")
