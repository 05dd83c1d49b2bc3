"""For a user with MFA, a second factor is required by default for token creation,
policy changes (creating a user attaches policies), key rotation, cluster deletion and
maintenance commands on the hosts;
key rotation is reachable through the API (RotateKeys), the SDK and the CLI."""

from __future__ import annotations

import json

import httpx
import pytest
from typer.testing import CliRunner

from podfleet.checkpoint import keys
from podfleet.cli.main import app as cli
from podfleet.control.workdir import cluster_workdir
from tests.security.conftest import Api

# (method, path, body): each one a change MFARequired guards, in an order that works.
GUARDED = [
    ("POST", "/v1/tokens", {"name": "bob-ci", "role": "viewer"}),  # CreateAccessToken
    ("POST", "/v1/users", {"name": "carol", "policies": []}),  # CreateUser
    ("PUT", "/v1/users/carol/policies/ReadOnly", None),  # PutUserPolicy
    ("DELETE", "/v1/users/carol/policies/ReadOnly", None),  # DeleteUserPolicy
    ("POST", "/v1/clusters/kr/keys/rotate", None),  # RotateKeys
    ("POST", "/v1/clusters/kr/maintenance", {"command": "true"}),  # StartMaintenance
    ("DELETE", "/v1/clusters/kr", None),  # DeleteCluster
]


@pytest.fixture(scope="module")
def bob(api: Api) -> dict:
    api.app.state.mfa_key = b"m" * 32
    with api.client("admin") as c:
        assert c.post("/v1/users", json={"name": "bob", "policies": ["ClusterAdmin"]}).status_code == 201
        assert c.post("/v1/users", json={"name": "dave", "policies": ["ClusterAdmin"]}).status_code == 201
        r = c.post("/v1/clusters", json={"name": "kr", "fabric": "local", "chips": 1})
        assert r.status_code == 201, r.text
        enrol = c.post("/v1/users/bob/mfa")
        assert enrol.status_code == 201
    _, tok = api.add_token("viewer", "bob")
    _, dave = api.add_token("viewer", "dave")  # a user without MFA enrolled
    return {"token": tok, "dave": dave, "recovery": enrol.json()["recovery_codes"],
            "cluster_id": r.json()["id"]}


def _as(api: Api, token: str, mfa: str | None = None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}", **({"X-Podfleet-MFA": mfa} if mfa else {})}
    return httpx.Client(base_url=api.url, headers=headers, timeout=30)


def test_key_rotation_through_the_api_sdk_and_cli(api: Api, bob: dict) -> None:
    kek = keys.kek_path_for(cluster_workdir(api.workdir, bob["cluster_id"]))
    assert kek.is_file() and not keys.load_ring(kek).retired
    with api.client("viewer") as v:
        assert v.post("/v1/clusters/kr/keys/rotate").status_code == 403
    with api.client("admin") as c:  # a role token: no second factor (not bound to MFA)
        r = c.post("/v1/clusters/kr/keys/rotate")
        assert r.status_code == 200, r.text
        assert r.json()["version"] == "v2" and r.json()["versions"] == ["v1", "v2"]
        assert c.post("/v1/clusters/nope/keys/rotate").status_code == 404
    out = CliRunner().invoke(cli, ["keys", "rotate", "--cluster", "kr", "--url", api.url,
                                   "--token", api.tokens["admin"], "--output", "json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["version"] == "v3"
    assert list(keys.load_ring(kek).versions) == ["v1", "v2", "v3"]
    with api.client("admin") as c:
        events = c.get("/v1/audit", params={"max_results": 1000}).json()["events"]
    assert sum(e["action"] == "RotateKeys" and e["result"] == "ok" for e in events) == 2


def test_guarded_changes_need_a_second_factor(api: Api, bob: dict) -> None:
    codes = list(bob["recovery"])
    for method, path, body in GUARDED:
        with _as(api, bob["token"]) as c:
            r = c.request(method, path, json=body)
            assert r.status_code == 403 and "X-Podfleet-MFA" in r.json()["detail"], (path, r.text)
        with _as(api, bob["dave"]) as c:  # no MFA enrolled: cannot present one, so denied too
            assert c.request(method, path, json=body).status_code == 403, path
        with _as(api, bob["token"], mfa=codes.pop()) as c:
            r = c.request(method, path, json=body)
            assert r.status_code in (200, 201, 202), (path, r.text)
    with _as(api, bob["token"]) as c:  # reads need no second factor
        assert c.get("/v1/clusters").status_code == 200
