"""Console sign-in: the cookie, the server-side session, CSRF on cookie writes (no browser)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from podfleet.console import routes
from podfleet.console.sessions import COOKIE, SessionStore
from tests.console.conftest import Served, wait_active


def sign_in(s: Served, role: str = "admin") -> tuple[httpx.Client, str]:
    c = httpx.Client(base_url=s.url, timeout=30)
    r = c.post("/console/session", json={"token": s.tokens[role]})
    assert r.status_code == 200, r.text
    return c, r.json()["csrf"]


def test_sign_in_sets_an_httponly_strict_cookie_and_never_returns_the_token(served: Served) -> None:
    c = httpx.Client(base_url=served.url, timeout=30)
    r = c.post("/console/session", json={"token": served.tokens["operator"]})
    assert r.status_code == 200
    cookie = r.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert served.tokens["operator"] not in cookie and served.tokens["operator"] not in r.text
    body = r.json()
    assert body["role"] == "operator" and body["signed_in"] and len(body["csrf"]) >= 32
    me = c.get("/console/session").json()
    assert me == body


def test_a_wrong_token_is_refused_with_a_problem_and_no_cookie(served: Served) -> None:
    r = httpx.post(f"{served.url}/console/session", json={"token": "pf_wrong"})
    assert r.status_code == 401 and r.json()["code"] == "unauthorized"
    assert "set-cookie" not in r.headers
    r = httpx.post(f"{served.url}/console/session", json={"nope": 1})
    assert r.status_code == 400 and r.json()["code"] == "invalid-input"


def test_not_signed_in_is_an_answer_not_an_error(served: Served) -> None:
    r = httpx.get(f"{served.url}/console/session")
    assert r.status_code == 200 and r.json() == {"signed_in": False}
    r = httpx.get(f"{served.url}/v1/clusters", cookies={COOKIE: "forged"})
    assert r.status_code == 401


def test_the_cookie_reads_the_api_and_writes_only_with_the_csrf_token(served: Served) -> None:
    c, csrf = sign_in(served, "operator")
    assert c.get("/v1/clusters").status_code == 200
    body = {"kind": "hbm-corrected-burst", "chip": 5}
    r = c.post("/v1/clusters/pod-0/faults", json=body)
    assert r.status_code == 403 and r.json()["code"] == "csrf"
    r = c.post("/v1/clusters/pod-0/faults", json=body, headers={"X-CSRF-Token": "x" * 43})
    assert r.status_code == 403 and r.json()["code"] == "csrf"
    r = c.post("/v1/clusters/pod-0/faults", json=body,
               headers={"X-CSRF-Token": csrf, "Origin": "http://evil.example"})
    assert r.status_code == 403 and "cross-origin" in r.json()["detail"]
    wait_active(c, "pod-0")
    r = c.post("/v1/clusters/pod-0/faults", json=body, headers={"X-CSRF-Token": csrf, "Origin": served.url})
    assert r.status_code == 202, r.text


def test_the_cookie_carries_the_role_of_its_token(served: Served) -> None:
    c, csrf = sign_in(served, "viewer")
    r = c.post("/v1/clusters/pod-0/faults", json={"kind": "chip-failure", "chip": 1}, headers={"X-CSRF-Token": csrf})
    assert r.status_code == 403 and r.json()["code"] == "forbidden"
    assert c.get("/v1/audit").status_code == 403


def test_sign_out_ends_the_session(served: Served) -> None:
    c, csrf = sign_in(served)
    sid = c.cookies[COOKIE]
    assert c.post("/console/logout").status_code == 403  # a write: needs the CSRF token
    assert c.post("/console/logout", headers={"X-CSRF-Token": csrf}).status_code == 204
    r = httpx.get(f"{served.url}/v1/clusters", cookies={COOKIE: sid})
    assert r.status_code == 401


def test_a_cross_origin_sign_in_is_refused(served: Served) -> None:
    r = httpx.post(f"{served.url}/console/session", json={"token": served.tokens["admin"]},
                   headers={"Origin": "http://evil.example"})
    assert r.status_code == 403 and "set-cookie" not in r.headers


def test_the_hardware_stream_needs_a_viewer_and_sends_the_snapshot(served: Served) -> None:
    assert httpx.get(f"{served.url}/console/stream/clusters/pod-0/hardware").status_code == 401
    c, _ = sign_in(served, "viewer")
    with c.stream("GET", "/console/stream/clusters/pod-0/hardware") as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = r.iter_lines()
        first = next(lines)
        assert first.startswith("id: ")  # the sample's wall-clock time, unix ms
        assert abs(int(first[4:]) / 1000 - time.time()) < 60
        assert next(lines) == "event: hardware"
        data = next(lines)
        assert data.startswith("data: {") and '"chips":[' in data
    assert c.get("/console/stream/clusters/nope/hardware").status_code == 404


def test_an_unbuilt_console_answers_503_with_how_to_build_it(served: Served, monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    monkeypatch.setattr(routes, "DIST", tmp_path / "dist")
    r = httpx.get(f"{served.url}/clusters/pod-0")
    assert r.status_code == 503 and "make console" in r.text
    assert httpx.get(f"{served.url}/healthz").status_code == 200


def test_pages_are_served_for_console_paths_and_the_api_keeps_its_404(served: Served) -> None:
    for path in ("/", "/login", "/clusters/pod-0", "/jobs", "/tokens"):
        r = httpx.get(f"{served.url}{path}")
        assert r.status_code in (200, 503) and r.headers["content-type"].startswith("text/html")
        assert "script-src 'self'" in r.headers["content-security-policy"]
    r = httpx.get(f"{served.url}/v1/nonexistent", headers={"Authorization": f"Bearer {served.tokens['admin']}"})
    assert r.status_code == 404 and r.headers["content-type"].startswith("application/problem+json")


def test_sessions_expire_and_are_bounded() -> None:
    store = SessionStore(ttl_s=-1.0)
    sid, _ = store.open("t")
    assert store.get(sid) is None
    store = SessionStore(max_sessions=3)
    ids = [store.open(f"t{i}")[0] for i in range(5)]
    assert [store.get(i) is not None for i in ids] == [False, False, True, True, True]
    assert store.get("x" * 200) is None


@pytest.mark.parametrize("value", ["", None])
def test_no_cookie_presents_no_token(value: str | None) -> None:
    assert SessionStore().get(value) is None


def test_the_overview_reads_degrade_to_empty_listings_not_errors(served: Served) -> None:
    """The overview reads every cluster's firing alerts, the firmware page its rollouts: a
    cluster that cannot have any answers an empty list (a failed request is an error in the
    browser's console), and an unknown cluster is still a 404."""
    with served.client() as c:
        state = served.server.app.state
        health, state.health = state.health, None  # as an app built without health monitoring
        try:
            r = c.get("/v1/clusters/pod-0/alerts?state=firing")
            assert r.status_code == 200 and r.json() == {"alerts": []}
            assert c.get("/v1/clusters/no-such/alerts").status_code == 404
        finally:
            state.health = health
        r = c.post("/v1/clusters", json={"name": "cpu-fw", "type": "custom", "dims": [2], "fabric": "local"})
        assert r.status_code in (200, 201, 202), r.text
        try:
            wait_active(c, "cpu-fw")
            r = c.get("/v1/clusters/cpu-fw/firmware")
            assert r.status_code == 200 and r.json()["rollouts"] == []
            assert "PODFLEET_FIRMWARE_COMMAND" in r.json()["unavailable"]
            refused = c.post("/v1/clusters/cpu-fw/firmware", json={"version": "2.22.0"})
            assert refused.status_code == 409 and refused.json()["detail"] == r.json()["unavailable"]
            assert c.get("/v1/clusters/pod-0/firmware").json().get("unavailable") is None
        finally:
            c.delete("/v1/clusters/cpu-fw")
