"""Authorization for every operationId and role, generated from /openapi.json: a new
endpoint without a rule in RULES fails here."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

import httpx
import pytest

from podfleet.api.auth import RULES, flush_denials
from podfleet.api.guard import GuardConfig
from podfleet.api.main import create_app
from podfleet.api.server import bootstrap_admin
from podfleet.api.testing import role_tokens, serve_in_thread
from podfleet.control import ControlPlane
from podfleet.engine.timeline import Timeline
from podfleet.fabric.factory import make_fabric
from podfleet.planner.adapter import PlannerAdapter
from podfleet.security.tokens import Role
from podfleet.store.memory import MemoryStore
from tests.api.conftest import ADMIN_TOKEN, Live

PUBLIC = {"Healthz", "Readyz", "Metrics"}


@dataclass
class AppLive(Live):
    app: Any = None

    def flush_denials(self) -> None:
        """Write the denial summaries still counted in memory (as shutdown does)."""
        asyncio.run(flush_denials(self.app))


@pytest.fixture(scope="module")
def live() -> Iterator[AppLive]:
    store = MemoryStore()
    plane = ControlPlane(store, Timeline(seed=3, speed=50.0), fabric_factory=make_fabric, planner=PlannerAdapter(), telemetry_interval_s=1.0)
    bootstrap_admin(plane, ADMIN_TOKEN)
    tokens = role_tokens(store, ADMIN_TOKEN)
    # The matrix tests answer hundreds of requests without a valid token: with the default
    # failed-authentication budget (60, refilled at 2/s) a later test's anonymous calls got
    # 429 instead of 401 whenever the tests before it ran fast enough. The limit itself is
    # tested in tests/security.
    app = create_app(plane, guard=GuardConfig(auth_fail_burst=100_000))
    with serve_in_thread(plane, app=app) as url:
        yield AppLive(url, plane, store, tokens, app)


def operations(live: Live) -> list[tuple[str, str, str]]:
    # The first /openapi.json builds the document (seconds on a loaded 2-core machine).
    doc = httpx.get(f"{live.url}/openapi.json", timeout=60).json()
    out = []
    for path, item in doc["paths"].items():
        for method, op in item.items():
            out.append((op["operationId"], method, path))
    return out


def test_every_operation_has_a_rule(live: Live) -> None:
    ops = {op for op, _, path in operations(live) if path.startswith("/v1/")}
    missing = ops - set(RULES)
    assert not missing, f"operations without an authz rule: {sorted(missing)}"
    assert {op for op, _, path in operations(live) if not path.startswith("/v1/")} <= PUBLIC
    for name in ("CreateTrainiumCluster", "DescribeCluster", "ListClusters", "DeleteCluster",
                 "DescribeClusterHardware", "SubmitTrainingJob", "DescribeTrainingJob",
                 "ListTrainingJobs", "StopTrainingJob", "InjectFault", "PlanParallelism", "ListAuditEvents"):
        assert name in ops


def _call(c: httpx.Client, method: str, path: str) -> httpx.Response:
    path = path.replace("{cluster}", "authz-ghost").replace("{job}", "job-ghost")
    return c.request(method, path, json={} if method in ("post", "put") else None)


def test_roles_per_operation(live: AppLive) -> None:
    audit_before = len(list(live.store.iter_audit()))
    denied = 0
    checked = 0
    for op, method, path in operations(live):
        if not path.startswith("/v1/"):
            continue
        for role in Role:
            with live.client(role.value) as c:
                r = _call(c, method, path)
            allowed = role.allows(RULES[op])
            if allowed:
                assert r.status_code not in (401, 403), (op, role, r.text)
            else:
                assert r.status_code == 403, (op, role, r.status_code)
                assert r.json()["code"] == "forbidden"
                denied += 1
            checked += 1
        with live.client(None) as anon:
            r = _call(anon, method, path)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", op
        denied += 1
    assert checked >= 3 * 15
    # Every denied call is in the audit trail: the first of each kind as its own row, the
    # repeats aggregated into one summary row with their count (a flood cannot flood it).
    live.flush_denials()
    records = [r for r in list(live.store.iter_audit())[audit_before:] if r.result == "denied"]
    assert sum(r.detail["count"] for r in records) == denied
    assert len(records) < denied / 4


@pytest.mark.parametrize("header", ["Bearer nope", "Basic abc", "Bearer"])
def test_bad_credentials(live: Live, header: str) -> None:
    r = httpx.get(f"{live.url}/v1/clusters", headers={"Authorization": header})
    assert r.status_code == 401 and r.json()["code"] == "unauthorized"


def test_audit_endpoints_and_tamper(live: AppLive) -> None:
    # Events of its own (a denial of each of three operations, each its own first row), not
    # whatever the tests before it left: under xdist it saw only two and no next page.
    with live.client(None) as anon:
        for path in ("/v1/clusters", "/v1/usage", "/v1/priority-classes"):
            assert anon.get(path).status_code == 401
    live.flush_denials()
    with live.client("admin") as c:
        page = c.get("/v1/audit", params={"max_results": 2}).json()
        assert len(page["events"]) == 2 and page["next_token"] == "2"
        assert c.get("/v1/audit/verify").json()["ok"] is True
        live.store.tamper_audit(1, result="tampered")
        try:
            v = c.get("/v1/audit/verify").json()
            assert v["ok"] is False and v["first_bad_seq"] == 1
        finally:
            rec = live.store._audit[0]
            rec.result = "ok"


def test_policy_matrix_for_every_operation(live: AppLive) -> None:
    """Every operationId, and every option action, against every built-in policy and role
    policy (from /openapi.json)."""
    from podfleet.api.auth import OPTION_RULES, role_policies
    from podfleet.security.policy import (
        ADMIN_READS,
        AUDIT_READS,
        BUILTIN,
        MFA_ACTIONS,
        MFA_KEY,
        OPTION_ACTIONS,
        evaluate,
    )

    ops = {(op, method) for op, method, path in operations(live) if path.startswith("/v1/")}
    for op, method in sorted(ops):
        # A role's policy grants exactly what RULES grants it: existing tokens keep their rights.
        for role in Role:
            assert evaluate([role_policies()[role]], op, "*").allowed == role.allows(RULES[op]), (op, role)
        matrix = {name: evaluate([p], op, "cluster/pod-0").allowed for name, p in BUILTIN.items()}
        assert matrix["ClusterAdmin"], op
        looks_read = op.startswith(("Describe", "List", "Get")) or op == "PlanParallelism"
        # What a viewer token may do (all reads) is what the read policies grant; the
        # admin-only reads (tokens, users) are granted by no read policy, whatever their name.
        read = RULES[op] == Role.VIEWER
        assert (op in ADMIN_READS) == (looks_read and RULES[op] == Role.ADMIN and op not in AUDIT_READS), op
        assert matrix["ReadOnly"] == read, op
        assert matrix["Auditor"] == (read or op in AUDIT_READS), op
        if op in ADMIN_READS:
            assert not any(matrix[n] for n in ("ReadOnly", "Scheduler", "Auditor", "StorageAccess")), op
        # PlanParallelism is a POST of a pure computation: it changes nothing.
        assert not (matrix["ReadOnly"] and method != "get" and op != "PlanParallelism"), f"ReadOnly may write: {op}"
        mfa_bound = evaluate([BUILTIN["MFARequired"]], op, "*", {MFA_KEY: "false"}).reason == "explicit-deny"
        assert mfa_bound == any(fnmatchcase(op, a) for a in MFA_ACTIONS), op
    assert set(OPTION_RULES) == set(OPTION_ACTIONS)
    for action in OPTION_ACTIONS:
        for role in Role:
            assert evaluate([role_policies()[role]], action, "*").allowed == role.allows(OPTION_RULES[action])
        granted = {name for name, p in BUILTIN.items() if evaluate([p], action, "cluster/pod-0").allowed}
        assert granted == ({"ClusterAdmin", "StorageAccess"} if action == "UseCheckpointOptions" else {"ClusterAdmin"})


# A user per built-in policy, each holding a token whose *role* is admin: what the user
# may do must come from the user's policies, never from the token's role.
USER_POLICIES = {"u-admin": "ClusterAdmin", "u-scheduler": "Scheduler", "u-storage": "StorageAccess",
                 "u-readonly": "ReadOnly", "u-auditor": "Auditor"}


@pytest.fixture(scope="module")
def user_tokens(live: AppLive) -> dict[str, str]:
    from podfleet.control import users
    from podfleet.security.tokens import generate_token, hash_token, new_token_id
    from podfleet.store.records import TokenRecord, UserRecord

    out = {}
    for name, policy in USER_POLICIES.items():
        users.view(UserRecord(name, [policy], {}, 0.0))  # the record is well formed
        live.store.save_user(UserRecord(name, [policy], {}, 0.0))
        tok = generate_token()
        live.store.add_token(TokenRecord(new_token_id(), name, "admin", hash_token(tok), 0.0))
        out[name] = tok
    return out


def _as(live: Live, token: str) -> httpx.Client:
    return httpx.Client(base_url=live.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def test_user_tokens_per_operation(live: AppLive, user_tokens: dict[str, str]) -> None:
    """Every operationId as a user of each built-in policy (with an admin-role token):
    403 exactly where the user's policies (plus MFARequired, no code sent) deny it."""
    from podfleet.security.policy import BUILTIN, MFA_KEY, builtin, evaluate

    checked = 0
    for op, method, path in operations(live):
        if not path.startswith("/v1/"):
            continue
        resource = "cluster/authz-ghost" if "{cluster}" in path else "job/job-ghost" if "{job}" in path else "*"
        for name, token in user_tokens.items():
            policies = [builtin(USER_POLICIES[name]), BUILTIN["MFARequired"]]
            allowed = evaluate(policies, op, resource, {MFA_KEY: "false"}).allowed
            with _as(live, token) as c:
                r = _call(c, method, path)
            if allowed:
                assert r.status_code not in (401, 403), (op, name, r.text)
            else:
                assert r.status_code == 403 and r.json()["code"] == "forbidden", (op, name, r.status_code)
            checked += 1
    assert checked >= 5 * 40


JOB = {"model": "llama3-8b", "chips": 4, "steps": 10}
OPTION_CALLS = {  # option action -> (operation, path, bodies that use the option)
    "UseCheckpointOptions": ("SubmitTrainingJob", "/v1/clusters/authz-ghost/jobs", [
        {**JOB, "options": {"encrypt_checkpoints": False}}, {**JOB, "options": {"checkpoint_dir": "/tmp/x"}},
        {**JOB, "options": {"key_file": "/tmp/k"}}]),
    "UseFabricCommands": ("CreateTrainiumCluster", "/v1/clusters", [
        {"name": "authz-ray", "fabric": "sim", "ray_address": "10.0.0.9:6379"},  # 422 when allowed: not ray
        {"name": "authz-neuron", "fabric": "sim", "neuron_ls": "true"},
        {"name": "authz-neuron", "fabric": "sim", "neuron_monitor": "true"}]),
}


def test_option_actions_for_role_and_user_tokens(live: AppLive, user_tokens: dict[str, str]) -> None:
    """Privileged job and cluster options are actions: role tokens get them as the role
    model says (admin), user tokens only where their policies grant them. A refusal is a
    403 naming the action, and audited; an allowed call goes on (and here fails later,
    on the ghost cluster or the sim fabric, never with 401/403)."""
    from podfleet.api.auth import OPTION_RULES
    from podfleet.security.policy import BUILTIN, builtin, evaluate

    audit_before = len(list(live.store.iter_audit()))
    refused = 0
    for action, (op, path, bodies) in OPTION_CALLS.items():
        # (who, token, may run the operation, may use the option)
        principals = [(role.value, live.tokens[role.value], role.allows(RULES[op]), role.allows(OPTION_RULES[action]))
                      for role in Role]
        for name, tok in user_tokens.items():
            policies = [builtin(USER_POLICIES[name]), BUILTIN["MFARequired"]]
            principals.append((name, tok, evaluate(policies, op, "cluster/x").allowed,
                               evaluate(policies, action, "cluster/x").allowed))
        for who, token, may_op, may_option in principals:
            for body in bodies:
                with _as(live, token) as c:
                    r = c.post(path, json=body)
                if may_op and may_option:
                    assert r.status_code not in (401, 403), (action, who, body, r.text)
                    continue
                assert r.status_code == 403, (action, who, body, r.status_code, r.text)
                if may_op:  # refused for the option, naming it
                    assert action in r.json()["detail"], (action, who, r.text)
                    refused += 1
    # The Scheduler user holding an admin-role token: its policies decide (finding 7).
    with _as(live, user_tokens["u-scheduler"]) as c:
        r = c.post("/v1/clusters/authz-ghost/jobs", json={**JOB, "options": {"encrypt_checkpoints": False}})
    assert r.status_code == 403 and "UseCheckpointOptions" in r.json()["detail"], r.text
    assert refused == 3 + 3 + 3  # the operator token (both actions), the Scheduler user (checkpoints)
    live.flush_denials()
    records = [r for r in list(live.store.iter_audit())[audit_before:] if r.result == "denied"]
    assert any(r.detail.get("action") == "UseCheckpointOptions" and r.detail.get("user") == "u-scheduler"
               for r in records)
    assert any(r.detail.get("action") == "UseFabricCommands" and r.detail.get("role") == "operator" for r in records)
