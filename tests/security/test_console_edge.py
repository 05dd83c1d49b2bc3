"""The console's sign-in and live stream at the request edge: they share the API's
failed-authentication limit (finding 12), and a stream ends when its token is revoked
or its session signed out (finding 10), as the API's log streams do."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from podfleet.api.server import Server, build_server, ensure_default_cluster
from podfleet.api.testing import role_tokens, serve_in_thread
from podfleet.settings import Settings
from podfleet.store.memory import MemoryStore

ADMIN = "pf_console-edge-admin-token-0123456789abcdef"
STREAM = "/console/stream/clusters/pod-0/hardware"


@dataclass
class Console:
    url: str
    server: Server
    tokens: dict[str, str]

    def admin(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)

    def new_token(self, name: str) -> tuple[str, str]:
        with self.admin() as c:
            r = c.post("/v1/tokens", json={"name": name, "role": "viewer"})
            assert r.status_code == 201, r.text
            return r.json()["id"], r.json()["token"]


def console(tmp_path: Path, **settings: float) -> Iterator[Console]:
    s = Settings(speed=50.0, admin_token=ADMIN, key_dir=str(tmp_path / "keys"),
                 audit_digests_dir=str(tmp_path / "digests"), **settings)
    server = build_server(s, MemoryStore())
    tokens = role_tokens(server.store, ADMIN)
    with serve_in_thread(server.plane, app=server.app) as url:
        ensure_default_cluster(server.plane, "pod-0")
        yield Console(url, server, tokens)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    yield from console(tmp_path_factory.mktemp("console"))


def test_console_sign_in_shares_the_failed_authentication_limit(tmp_path: Path) -> None:
    for con in console(tmp_path, auth_fail_per_s=0.01, auth_fail_burst=5):
        codes = [httpx.post(f"{con.url}/console/session", json={"token": f"pf_guess-{i}"}).status_code
                 for i in range(6)]
        assert codes == [401] * 5 + [429]
        r = httpx.post(f"{con.url}/console/session", json={"token": "pf_guess-again"})
        assert r.status_code == 429 and r.json()["code"] == "rate-limited" and int(r.headers["retry-after"]) >= 1
        # The same bucket for the API and the stream: the guesser cannot switch doors...
        assert httpx.get(f"{con.url}/v1/clusters", headers={"Authorization": "Bearer pf_x"}).status_code == 429
        assert httpx.get(f"{con.url}{STREAM}").status_code == 429
        # ...and a valid token from the same address is never refused for the guesses.
        r = httpx.post(f"{con.url}/console/session", json={"token": con.tokens["viewer"]})
        assert r.status_code == 200 and r.json()["signed_in"] is True
        with con.admin() as c:
            assert c.get("/v1/clusters").status_code == 200


def test_an_anonymous_stream_is_refused_before_it_starts(served: Console) -> None:
    r = httpx.get(f"{served.url}{STREAM}")
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"


def _follow(url: str, client: httpx.Client, events: list[str], first: threading.Event) -> threading.Thread:
    def run() -> None:
        with client.stream("GET", url, timeout=30) as r:
            assert r.status_code == 200, r.read()
            for line in r.iter_lines():
                events.append(line)
                if line.startswith("event: hardware"):
                    first.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert first.wait(15), f"no hardware event: {events[:5]}"
    return t


def _ends(t: threading.Thread, events: list[str]) -> None:
    t.join(timeout=10)
    assert not t.is_alive(), "the stream outlived its credential"
    assert any("token revoked" in e for e in events), events[-5:]


@pytest.mark.parametrize("how", ["cookie", "bearer"])
def test_the_hardware_stream_ends_when_its_token_is_revoked(served: Console, how: str) -> None:
    tid, tok = served.new_token(f"watcher-{how}")
    client = httpx.Client(base_url=served.url, timeout=30)
    if how == "cookie":
        assert client.post("/console/session", json={"token": tok}).status_code == 200
    else:
        client.headers["Authorization"] = f"Bearer {tok}"
    events: list[str] = []
    t = _follow(STREAM, client, events, threading.Event())
    time.sleep(1.5)
    assert t.is_alive()  # streaming while the token stands
    with served.admin() as c:
        assert c.delete(f"/v1/tokens/{tid}").status_code == 200
    _ends(t, events)
    client.close()


def test_the_hardware_stream_ends_when_its_session_signs_out(served: Console) -> None:
    _, tok = served.new_token("watcher-session")
    client = httpx.Client(base_url=served.url, timeout=30)
    r = client.post("/console/session", json={"token": tok})
    csrf = r.json()["csrf"]
    events: list[str] = []
    t = _follow(STREAM, client, events, threading.Event())
    with httpx.Client(base_url=served.url, cookies=client.cookies, timeout=30) as other:  # the same browser, a tab
        assert other.post("/console/logout", headers={"X-CSRF-Token": csrf}).status_code == 204
    _ends(t, events)
    client.close()
