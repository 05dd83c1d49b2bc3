"""Findings 7 and 9 as regression tests: what a user's token may do comes from the
user's policies, never from the token's role; and the read policies do not reach the
admin-only reads (tokens, users). The full matrix is tests/api/test_authz.py."""

from __future__ import annotations

import httpx
import pytest

from tests.security.conftest import Api


def _as(api: Api, token: str) -> httpx.Client:
    return httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


@pytest.fixture(scope="module")
def people(api: Api) -> dict[str, str]:
    """A user per policy, each holding a token whose role is admin."""
    out = {}
    with api.client("admin") as c:
        assert c.post("/v1/clusters", json={"name": "fx", "type": "trn2-node"}).status_code == 201
        for name, policies in {"sam": ["Scheduler"], "rosa": ["ReadOnly"], "aude": ["Auditor"],
                               "stella": ["Scheduler", "StorageAccess"]}.items():
            assert c.post("/v1/users", json={"name": name, "policies": policies}).status_code == 201
            out[name] = api.add_token("admin", name)[1]
    return out


def test_a_scheduler_user_with_an_admin_token_cannot_turn_checkpoint_encryption_off(api: Api,
                                                                                   people: dict[str, str]) -> None:
    job = {"model": "llama3-8b", "chips": 4, "steps": 10}
    since = len(list(api.store.iter_audit()))
    for options in ({"encrypt_checkpoints": False}, {"checkpoint_dir": "/tmp/elsewhere"}, {"key_file": "/tmp/k"}):
        with _as(api, people["sam"]) as c:
            r = c.post("/v1/clusters/fx/jobs", json={**job, "options": options})
        assert r.status_code == 403, r.text
        assert "user sam may not UseCheckpointOptions" in r.json()["detail"]
    with _as(api, people["sam"]) as c:  # the same job without the option is the Scheduler's to submit
        assert c.post("/v1/clusters/fx/jobs", json=job).status_code == 201
    with _as(api, people["stella"]) as c:  # StorageAccess grants the action: past authorization, the
        r = c.post("/v1/clusters/fx/jobs", json={**job, "options": {"encrypt_checkpoints": False}})
        assert r.status_code == 422 and "worker processes" in r.json()["detail"], r.text  # twin refuses options
    with api.client("operator") as c:  # a role token: its role decides (admin only)
        r = c.post("/v1/clusters/fx/jobs", json={**job, "options": {"encrypt_checkpoints": False}})
        assert r.status_code == 403 and "UseCheckpointOptions" in r.json()["detail"]
    with _as(api, people["sam"]) as c:  # the same for host commands: UseFabricCommands
        r = c.post("/v1/clusters", json={"name": "evil", "fabric": "neuron", "neuron_ls": "/bin/sh -c id"})
        assert r.status_code == 403
    api.flush_denials()
    assert any(r.detail.get("action") == "UseCheckpointOptions" and r.detail.get("user") == "sam"
               for r in api.denied(since))


@pytest.mark.parametrize("user", ["rosa", "sam", "aude"])
def test_read_policies_do_not_list_tokens_or_users(api: Api, people: dict[str, str], user: str) -> None:
    with _as(api, people[user]) as c:
        for path in ("/v1/tokens", "/v1/users", "/v1/users/sam"):
            r = c.get(path)
            assert r.status_code == 403, (user, path, r.status_code)
        assert c.get("/v1/clusters").status_code == 200  # their reads still work
    with api.client("viewer") as v:
        assert v.get("/v1/tokens").status_code == 403
