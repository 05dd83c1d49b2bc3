"""Users own tokens; their policies decide (explicit deny > allow > implicit deny); TOTP
MFA guards deletion, policy changes and token creation; codes are refused on replay."""

from __future__ import annotations

import base64
import time
from urllib.parse import parse_qs, urlparse

import httpx
import pytest

from podfleet.security.mfa import STEP_S, code_at
from tests.security.conftest import Api


@pytest.fixture(scope="module")
def alice(api: Api) -> dict:
    api.app.state.mfa_key = b"m" * 32  # `podfleet up` takes it from the key provider
    with api.client("admin") as c:
        assert c.post("/v1/users", json={"name": "alice", "policies": ["Scheduler"]}).status_code == 201
        for name in ("ux-dev", "prod-a"):
            assert c.post("/v1/clusters", json={"name": name, "type": "trn2-node"}).status_code == 201
    _, tok = api.add_token("viewer", "alice")  # the token's role no longer decides: alice's policies do
    return {"token": tok}


def as_alice(api: Api, alice: dict, mfa: str | None = None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {alice['token']}", **({"X-Podfleet-MFA": mfa} if mfa else {})}
    return httpx.Client(base_url=api.url, headers=headers, timeout=30)


def test_a_users_policies_decide(api: Api, alice: dict) -> None:
    with as_alice(api, alice) as c:
        r = c.post("/v1/clusters/ux-dev/jobs", json={"model": "llama3-8b", "chips": 4, "steps": 10})
        assert r.status_code == 201, r.text  # Scheduler allows it (a viewer token could not)
        r = c.get("/v1/audit")
        assert r.status_code == 403 and "denied explicitly by Scheduler" in r.json()["detail"]
        r = c.post("/v1/clusters", json={"name": "mine", "type": "trn2-node"})
        assert r.status_code == 403 and "no statement allows it" in r.json()["detail"]
        assert c.delete("/v1/clusters/ux-dev").status_code == 403
    with api.client("viewer") as v:  # a role token: unchanged
        assert v.post("/v1/users", json={"name": "eve"}).status_code == 403


def test_mfa_guards_deletion_and_codes_work_once(api: Api, alice: dict) -> None:
    with api.client("admin") as c:
        assert c.put("/v1/users/alice/policies/ClusterAdmin").status_code == 200
        deny = {"Statement": [{"Effect": "Deny", "Action": "Delete*", "Resource": "cluster/prod-*"}]}
        r = c.put("/v1/users/alice/policies/protect-prod", json=deny)
        assert r.status_code == 200 and r.json()["inline_policies"] == ["protect-prod"]
        enrol = c.post("/v1/users/alice/mfa")
        assert enrol.status_code == 201
        out = enrol.json()
        assert c.post("/v1/users/alice/mfa").status_code == 409  # enrolled once
        assert "otpauth" not in str(c.get("/v1/users/alice").json())
    b32 = parse_qs(urlparse(out["otpauth_uri"]).query)["secret"][0]
    secret = base64.b32decode(b32 + "=" * (-len(b32) % 8))
    with as_alice(api, alice) as c:
        r = c.delete("/v1/clusters/ux-dev")
        assert r.status_code == 403 and "X-Podfleet-MFA" in r.json()["detail"]
    now = time.time()
    code = code_at(secret, now)
    with as_alice(api, alice, mfa=code) as c:
        assert c.delete("/v1/clusters/ux-dev").status_code == 200
    with as_alice(api, alice, mfa=code) as c:  # replayed
        r = c.get("/v1/clusters")
        assert r.status_code == 401 and "already used" in r.json()["detail"]
    with as_alice(api, alice, mfa=code_at(secret, now + STEP_S)) as c:
        r = c.delete("/v1/clusters/prod-a")  # MFA or not, the explicit Deny wins
        assert r.status_code == 403 and "protect-prod" in r.json()["detail"]
    with as_alice(api, alice, mfa=out["recovery_codes"][0]) as c:
        assert c.get("/v1/clusters").status_code == 200
    with as_alice(api, alice, mfa=out["recovery_codes"][0]) as c:
        assert c.get("/v1/clusters").status_code == 401
    with as_alice(api, alice, mfa="000000") as c:
        assert c.get("/v1/clusters").status_code == 401
    with api.client("admin") as c:
        events = c.get("/v1/audit", params={"max_results": 1000}).json()["events"]
    assert any(e["action"] == "EnableMfa" and e["target"] == "alice" for e in events)
    assert not any(out["recovery_codes"][1] in str(e) for e in events)  # secrets never audited


def test_bad_policies_are_refused_with_the_field(api: Api, alice: dict) -> None:
    with api.client("admin") as c:
        r = c.put("/v1/users/alice/policies/bad", json={"Statement": [{"Effect": "Maybe", "Action": "*"}]})
        assert r.status_code == 400 and "Effect" in r.json()["field"]
        r = c.put("/v1/users/alice/policies/NoSuchBuiltin")
        assert r.status_code == 404 and "ReadOnly" in str(r.json().get("allowed"))
        r = c.put("/v1/users/alice/policies/x", json={"Statement": [{"Effect": "Allow", "Action": []}]})
        assert r.status_code == 400 and "Action" in r.json()["field"]
        r = c.post("/v1/users", json={"name": "bob", "policies": ["Root"]})
        assert r.status_code == 400 and r.json()["field"].startswith("policies")
        assert c.put("/v1/users/nobody/policies/ReadOnly").status_code == 404


def test_no_user_takes_over_the_bootstrap_admins_tokens(api: Api) -> None:
    # A user owns the tokens named after it: a user "admin" would put the bootstrap admin
    # token under its policies (a fuzzer's deny-all policy locked the admin out of the audit).
    with api.client("admin") as c:
        r = c.post("/v1/users", json={"name": "admin", "policies": ["ReadOnly"]})
        assert r.status_code == 409 and "reserved" in r.json()["detail"], r.text
        assert c.get("/v1/audit").status_code == 200
