"""Regression tests for the holes found by probing the API: each attack, refused."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from podfleet.api.guard import GuardConfig, bad_identifier
from podfleet.errors import InvalidInputError
from podfleet.sdk.client import PodfleetClient, _seg
from tests.security.conftest import Api, serve


def test_malformed_json_without_a_token_is_401_not_a_parse_error(api: Api) -> None:
    r = httpx.post(f"{api.url}/v1/clusters", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 401 and r.json()["code"] == "unauthorized"
    assert r.headers["www-authenticate"] == "Bearer"


def test_a_large_body_without_a_token_is_refused_before_it_is_read(api: Api) -> None:
    # 8 MiB announced, refused with 401 on the headers alone: the body is never parsed.
    r = httpx.post(f"{api.url}/v1/clusters", content=b"x" * (8 << 20), headers={"content-type": "application/json"})
    assert r.status_code == 401


def test_body_limit_with_a_token(api: Api) -> None:
    with api.client("admin") as c:
        big = b'{"name": "' + b"a" * (2 << 20) + b'"}'
        r = c.post("/v1/clusters", content=big, headers={"content-type": "application/json"})
        assert r.status_code == 413 and r.json()["code"] == "payload-too-large"
        assert "1048576" in r.json()["detail"]

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
            for _ in range(40):
                yield b" " * 65536

        r = c.post("/v1/clusters", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413
        assert c.get("/v1/clusters").status_code == 200


@pytest.mark.parametrize("raw", [b"/v1/tokens/..%2Fclusters%2Fpod", b"/v1/clusters/a%2fb", b"/v1/clusters/%2e%2e",
                                 b"/v1/jobs/a%5Cb"])
def test_identifiers_with_slashes_or_dots_are_refused(api: Api, raw: bytes) -> None:
    assert bad_identifier(raw)
    with api.client("admin") as c:
        r = c.request("DELETE" if b"tokens" in raw else "GET", httpx.URL(api.url + raw.decode()))
        assert r.status_code == 404 and r.json()["field"] == "path", raw
        assert "identifiers never" in r.json()["detail"]


def test_the_sdk_never_lets_an_identifier_become_a_path(api: Api) -> None:
    assert _seg("../clusters/pod-0") == "..%2Fclusters%2Fpod-0"
    for bad in ("..", ".", ""):
        with pytest.raises(InvalidInputError):
            _seg(bad)
    with api.client("admin") as c:
        assert c.post("/v1/clusters", json={"name": "victim", "type": "trn2-node"}).status_code == 201
    sdk = PodfleetClient(api.url, api.tokens["admin"])
    with pytest.raises(Exception) as exc:
        sdk.revoke_access_token("../clusters/victim")
    assert getattr(exc.value, "status", None) == 404
    with api.client("admin") as c:  # the attack of the probe: the cluster is still there
        assert c.get("/v1/clusters/victim").json()["state"] != "DELETED"


def test_security_headers_on_every_response(api: Api) -> None:
    for path, headers in (("/healthz", {}), ("/v1/clusters", {"Authorization": f"Bearer {api.tokens['viewer']}"}),
                          ("/v1/clusters", {}), ("/no-such-route", {})):
        r = httpx.get(f"{api.url}{path}", headers=headers)
        assert r.headers["x-content-type-options"] == "nosniff", path
        assert r.headers["x-frame-options"] == "DENY"
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
        assert r.headers["referrer-policy"] == "no-referrer"
        assert "strict-transport-security" not in r.headers  # plain HTTP here


def test_a_flood_of_bogus_tokens_is_rate_limited_and_aggregated(tmp_path: Path) -> None:
    for api in serve(tmp_path, GuardConfig(auth_fail_rate_per_s=1.0, auth_fail_burst=50)):
        before = len(list(api.store.iter_audit()))
        codes = []
        with httpx.Client(base_url=api.url, headers={"Authorization": "Bearer pf_bogus-token"}) as c:
            for _ in range(200):
                codes.append(c.get("/v1/clusters").status_code)
        assert codes[:50] == [401] * 50 and codes.count(429) >= 140
        # 50 refusals went to the trail as one row plus (at the window's end) one summary.
        assert len(api.denied(before)) == 1
        api.flush_denials()
        rows = api.denied(before)
        # Every refusal counted once (the bucket refills at 1/s, so a slow machine may let
        # a 51st failure through as a 401 rather than a 429: that one is audited too).
        assert len(rows) == 2 and sum(r.detail["count"] for r in rows) == codes.count(401)
        assert rows[1].detail["aggregated"] is True and rows[1].detail["reason"] == "invalid or revoked token"
        # A valid token from the same address still works, at once: only failures are limited.
        with api.client("viewer") as ok:
            assert ok.get("/v1/clusters").status_code == 200


def test_per_token_rate_limit(tmp_path: Path) -> None:
    for api in serve(tmp_path, GuardConfig(token_rate_per_s=1.0, token_burst=5)):
        with api.client("viewer") as c:
            codes = [c.get("/v1/clusters").status_code for _ in range(8)]
        assert codes[:5] == [200] * 5 and codes[5:] == [429] * 3
        with api.client("admin") as c:  # another token has its own bucket
            r = c.get("/v1/clusters")
            assert r.status_code == 200
        with api.client("viewer") as c:
            r = c.get("/v1/clusters")
            assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1


def test_a_log_stream_ends_when_its_token_is_revoked(api: Api) -> None:
    with api.client("admin") as c:
        assert c.post("/v1/clusters", json={"name": "streamed", "type": "trn2-node"}).status_code == 201
        r = c.post("/v1/clusters/streamed/jobs", json={"model": "llama3-8b", "chips": 16, "steps": 10**8})
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]
    tid, tok = api.add_token("viewer", "watcher")
    events: list[str] = []

    def follow() -> None:
        with httpx.stream("GET", f"{api.url}/v1/jobs/{job_id}/logs", params={"follow": "true"},
                          headers={"Authorization": f"Bearer {tok}"}, timeout=30) as r:
            for line in r.iter_lines():
                events.append(line)

    t = threading.Thread(target=follow, daemon=True)
    t.start()
    time.sleep(1.0)
    assert t.is_alive()  # streaming: the job runs on
    with api.client("admin") as c:
        assert c.delete(f"/v1/tokens/{tid}").status_code == 200
    t.join(timeout=10)
    assert not t.is_alive(), "the stream outlived its token"
    assert any("token revoked" in e for e in events)
