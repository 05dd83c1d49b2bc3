"""Access tokens: an admin issues one per role, the role is enforced, revocation bites
at once, only hashes are stored, and every step is audited."""

from __future__ import annotations

import httpx

from podfleet.security.tokens import hash_token
from tests.api.conftest import Live


def test_issue_use_and_revoke_a_viewer_token(live: Live, admin: httpx.Client) -> None:
    r = admin.post("/v1/tokens", json={"name": "dash-board", "role": "viewer"})
    assert r.status_code == 201, r.text
    issued = r.json()
    secret = issued["token"]
    assert issued["role"] == "viewer" and secret.startswith("pf_")
    stored = live.store.get_token(issued["id"])
    assert stored is not None and stored.token_hash == hash_token(secret) and secret not in repr(stored)
    listed = admin.get("/v1/tokens").json()["tokens"]
    assert any(t["id"] == issued["id"] for t in listed) and all("token" not in t or t["token"] is None for t in listed)

    with httpx.Client(base_url=live.url, headers={"Authorization": f"Bearer {secret}"}) as viewer:
        assert viewer.get("/v1/clusters").status_code == 200
        denied = viewer.post("/v1/clusters", json={"name": "nope"})
        assert denied.status_code == 403 and denied.json()["code"] == "forbidden"
        assert viewer.post("/v1/tokens", json={"name": "x", "role": "admin"}).status_code == 403
        gone = admin.delete(f"/v1/tokens/{issued['id']}")
        assert gone.status_code == 200 and gone.json()["revoked"] is True
        assert viewer.get("/v1/clusters").status_code == 401

    actions = [e["action"] for e in admin.get("/v1/audit", params={"max_results": 1000}).json()["events"]]
    assert "CreateAccessToken" in actions and "RevokeAccessToken" in actions
    assert admin.get("/v1/audit/verify").json()["ok"] is True


def test_bad_token_requests(live: Live, admin: httpx.Client) -> None:
    bad = admin.post("/v1/tokens", json={"name": "x", "role": "root"})
    assert bad.status_code == 400 and "role" in bad.text
    assert admin.delete("/v1/tokens/tok-missing").status_code == 404
    with live.client("operator") as op:
        assert op.get("/v1/tokens").status_code == 403
    first = admin.post("/v1/tokens", json={"name": "ci-bot", "role": "operator"})
    assert first.status_code == 201
    again = admin.post("/v1/tokens", json={"name": "ci-bot", "role": "viewer"})
    assert again.status_code == 409 and again.json()["field"] == "name"
