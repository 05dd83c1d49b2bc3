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

PUBLIC = {"Healthz", "Metrics"}


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
    app = create_app(plane)
    with serve_in_thread(plane, app=app) as url:
        yield AppLive(url, plane, store, tokens, app)


def operations(live: Live) -> list[tuple[str, str, str]]:
    doc = httpx.get(f"{live.url}/openapi.json").json()
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


def test_audit_endpoints_and_tamper(live: Live) -> None:
    with live.client("admin") as c:
        page = c.get("/v1/audit", params={"maxResults": 2}).json()
        assert len(page["events"]) == 2 and page["nextToken"] == "2"
        assert c.get("/v1/audit/verify").json()["ok"] is True
        live.store.tamper_audit(1, result="tampered")
        try:
            v = c.get("/v1/audit/verify").json()
            assert v["ok"] is False and v["first_bad_seq"] == 1
        finally:
            rec = live.store._audit[0]
            rec.result = "ok"


def test_policy_matrix_for_every_operation(live: AppLive) -> None:
    """Every operationId against every built-in policy and role policy (from /openapi.json)."""
    from podfleet.api.auth import role_policies
    from podfleet.security.policy import BUILTIN, MFA_ACTIONS, MFA_KEY, evaluate

    ops = {(op, method) for op, method, path in operations(live) if path.startswith("/v1/")}
    audit_ops = {"ListAuditEvents", "VerifyAuditChain"}
    for op, method in sorted(ops):
        # A role's policy grants exactly what RULES grants it: existing tokens keep their rights.
        for role in Role:
            assert evaluate([role_policies()[role]], op, "*").allowed == role.allows(RULES[op]), (op, role)
        matrix = {name: evaluate([p], op, "cluster/pod-0").allowed for name, p in BUILTIN.items()}
        assert matrix["ClusterAdmin"], op
        read = op.startswith(("Describe", "List", "Get")) or op == "PlanParallelism"
        assert matrix["ReadOnly"] == (read and op not in audit_ops), op
        assert matrix["Auditor"] == (read or op in audit_ops), op
        # PlanParallelism is a POST of a pure computation: it changes nothing.
        assert not (matrix["ReadOnly"] and method != "get" and op != "PlanParallelism"), f"ReadOnly may write: {op}"
        mfa_bound = evaluate([BUILTIN["MFARequired"]], op, "*", {MFA_KEY: "false"}).reason == "explicit-deny"
        assert mfa_bound == any(fnmatchcase(op, a) for a in MFA_ACTIONS), op
