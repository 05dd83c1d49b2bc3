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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Generic, TypeVar

from fastapi import Depends, Request
from starlette.requests import HTTPConnection

from podfleet.control import users
from podfleet.errors import (
    AuthError,
    ChecksumError,
    ForbiddenError,
    InvalidInputError,
    UnavailableError,
)
from podfleet.security.policy import (
    CHECKPOINT_OPTIONS_ACTION,
    FABRIC_COMMANDS_ACTION,
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
from podfleet.store.protocol import TokenStore, UserStore

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
    "GetPresets": Role.VIEWER,
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
    # Advance reservations (api/routes/reservations.py)
    "ListReservations": Role.VIEWER,
    "DescribeReservation": Role.VIEWER,
    "CreateReservation": Role.OPERATOR,
    "DeleteReservation": Role.OPERATOR,
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
    # Maintenance rollouts run an admin's command on the hosts (api/routes/maintenance.py).
    "ListMaintenance": Role.VIEWER,
    "DescribeMaintenance": Role.VIEWER,
    "StartMaintenance": Role.ADMIN,
    "ResumeMaintenance": Role.ADMIN,
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
    "UnlockUser": Role.ADMIN,
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


# Actions inside an operation (``security/policy.OPTION_ACTIONS``): the least role whose
# tokens may use the option. A user's token is decided by the user's policies instead.
OPTION_RULES: dict[str, Role] = {
    CHECKPOINT_OPTIONS_ACTION: Role.ADMIN,
    FABRIC_COMMANDS_ACTION: Role.ADMIN,
}


@dataclass(frozen=True)
class Grants:
    """What decided this request (set by ``authorize``), so a handler can ask about an
    option action on the same terms: the user's policies, or the token's role policy."""

    policies: tuple[Policy, ...]
    context: Mapping[str, str]
    user: str | None  # None: a role token


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


def credential_live(conn: HTTPConnection) -> bool:
    """Whether the credential a request was let in with still stands: its token is not
    revoked and, for the console, its session is not signed out or expired. A stream
    outlives the request that authorised it, so every stream asks this on every loop."""
    token = presented_token(conn)
    return bool(token) and conn.app.state.tokens.lookup(token) is not None


V = TypeVar("V")


class _ReadThrough(Generic[V]):
    """Key -> what the store said of it, for ``ttl_s`` seconds: a store read per request
    would dominate a snapshot read. While the store does not answer, a key known a moment
    ago still reads (reads are answered from the read models during an outage); an
    unknown one gets the 503."""

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self.hits: dict[str, tuple[V, float]] = {}

    def get(self, key: str, load: Callable[[], V]) -> V:
        now = time.monotonic()
        hit = self.hits.get(key)
        if hit is not None and hit[1] > now:
            return hit[0]
        try:
            value = load()
        except UnavailableError:
            if hit is not None:
                return hit[0]
            raise
        if len(self.hits) > 10_000:
            self.hits.clear()
        self.hits[key] = (value, now + self.ttl_s)
        return value


class TokenCache:
    """Token hash -> principal, for a few seconds. Revocation takes effect within ``ttl_s``."""

    def __init__(self, store: TokenStore, ttl_s: float = 5.0) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self._cache: _ReadThrough[Principal | None] = _ReadThrough(ttl_s)

    @staticmethod
    def hash_of(token: str) -> str:
        return hash_token(token)

    def lookup(self, token: str) -> Principal | None:
        return self.lookup_hash(hash_token(token)) if token else None

    def lookup_hash(self, h: str) -> Principal | None:
        def load() -> Principal | None:
            rec = self.store.find_token_by_hash(h)
            return None if rec is None or rec.revoked else Principal(rec.id, rec.name, Role.parse(rec.role))

        return self._cache.get(h, load)

    def forget(self, token_id: str) -> None:
        """Drop a revoked token from this process's cache at once (other processes
        sharing the store still honour it for up to ``ttl_s``)."""
        hits = self._cache.hits
        for h, (p, _) in list(hits.items()):
            if p is not None and p.id == token_id:
                del hits[h]


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
        grants = Grants(tuple(user_policies), {MFA_KEY: "true" if mfa_ok else "false"}, principal.name)
        decision = evaluate(grants.policies, op, resource, grants.context)
        if required is None or not decision.allowed:
            await deny(request.app, client=client_address(request), actor=principal.actor, action=op,
                       target=target, detail={"reason": "not allowed", "user": principal.name,
                                              "decision": decision.describe()})
            hint = "; send a fresh code in X-Podfleet-MFA" if decision.policy == "MFARequired" else ""
            raise ForbiddenError(f"user {principal.name} may not {op} on {resource}: {decision.describe()}{hint}")
        request.state.principal, request.state.grants = principal, grants
        return principal
    grants = Grants((role_policies()[principal.role],), {"podfleet:PrincipalRole": principal.role.value}, None)
    decision = evaluate(grants.policies, op, resource, grants.context)
    if required is None or not decision.allowed:
        need = required.value if required else "a rule (none defined: denied)"
        await deny(request.app, client=client_address(request), actor=principal.actor, action=op, target=target,
                   detail={"reason": "not allowed", "role": principal.role.value, "required": need})
        raise ForbiddenError(f"role {principal.role.value} may not {op} (needs {need})",
                             allowed=[r.value for r in Role if required and r.allows(required)])
    request.state.principal, request.state.grants = principal, grants
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

    def __init__(self, store: UserStore, ttl_s: float = 5.0) -> None:
        self.store, self.ttl_s = store, ttl_s
        self._cache: _ReadThrough[list[Policy] | None] = _ReadThrough(ttl_s)

    def policies(self, name: str) -> list[Policy] | None:
        def load() -> list[Policy] | None:
            u = self.store.get_user(name)
            return users.policies_of(u) if u is not None else None

        return self._cache.get(name, load)

    def forget(self, name: str) -> None:
        self._cache.hits.pop(name, None)


@functools.cache
def role_policies() -> dict[Role, Policy]:
    """Each role's built-in policy, derived from ``RULES`` and ``OPTION_RULES``
    (``security/policy.role_policy``)."""
    ranks = {r.value: r.rank for r in Role}
    rules = {op: r.value for op, r in {**RULES, **OPTION_RULES}.items()}
    return {r: role_policy(r.value, rules, ranks) for r in Role}


# Job options that move checkpoints or their key out of the cluster's data directory, or
# turn encryption off: without UseCheckpointOptions a job writes encrypted checkpoints
# where podfleet puts them.
PRIVILEGED_JOB_OPTIONS = ("checkpoint_dir", "key_file", "encrypt_checkpoints")


def privileged_options(options: object) -> list[str]:
    if not isinstance(options, dict):
        return []
    return [k for k in PRIVILEGED_JOB_OPTIONS
            if k in options and not (k == "encrypt_checkpoints" and options[k] is True)]


async def require_action(request: Request, who: Principal, action: str, resource: str, *, op: str, target: str,
                         used: list[str], why: str, field: str) -> None:
    """403 (audited) unless this request's grants allow the option ``action`` on
    ``resource``: the user's policies for a user's token, the role's for a role token."""
    grants: Grants | None = getattr(request.state, "grants", None)
    decision = evaluate(grants.policies, action, resource, grants.context) if grants is not None else None
    if decision is not None and decision.allowed:
        return
    described = decision.describe() if decision is not None else "no grants (not authorized)"
    detail: dict[str, Any] = {"reason": "privileged option", "action": action, "options": used,
                              "decision": described}
    if grants is not None and grants.user is not None:
        detail["user"] = grants.user
        message = f"user {grants.user} may not {action} ({', '.join(used)}) on {resource}: {described}; {why}"
    else:
        need = OPTION_RULES[action].value
        detail.update(role=who.role.value, required=need)
        message = f"role {who.role.value} may not set {', '.join(used)} ({action}, needs {need}): {why}"
    await deny(request.app, client=client_address(request), actor=who.actor, action=op, target=target, detail=detail)
    raise ForbiddenError(message, field=field,
                         allowed=[r.value for r in Role if r.allows(OPTION_RULES[action])])


async def require_checkpoint_options(request: Request, who: Principal, cluster: str, options: object) -> None:
    """SubmitTrainingJob with a privileged job option needs UseCheckpointOptions."""
    used = privileged_options(options)
    if used:
        await require_action(request, who, CHECKPOINT_OPTIONS_ACTION, f"cluster/{cluster}", op="SubmitTrainingJob",
                             target=cluster, used=used, field="options",
                             why="checkpoints go encrypted under the cluster's data directory; leave these out")


async def require_fabric_commands(request: Request, who: Principal, cluster: str, used: list[str]) -> None:
    """CreateTrainiumCluster naming what the control plane connects to or runs on its
    own host (ray_address, neuron_ls, neuron_monitor) needs UseFabricCommands."""
    if used:
        await require_action(request, who, FABRIC_COMMANDS_ACTION, f"cluster/{cluster}", op="CreateTrainiumCluster",
                             target=cluster, used=used, field=used[0],
                             why="they name what the control plane connects to or runs on its own host; leave "
                                 "them out for the defaults")


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
