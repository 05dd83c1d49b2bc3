"""Authorization for every operationId and role, generated from /openapi.json: a new
endpoint without a rule in RULES fails here."""

from __future__ import annotations

import httpx
import pytest

from podfleet.api.auth import RULES
from podfleet.security.tokens import Role
from tests.api.conftest import Live

PUBLIC = {"Healthz", "Metrics"}


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


def test_roles_per_operation(live: Live) -> None:
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
    # Every denied call left an audit record.
    records = list(live.store.iter_audit())[audit_before:]
    assert sum(r.result == "denied" for r in records) == denied


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
