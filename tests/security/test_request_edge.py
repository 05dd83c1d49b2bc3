"""Regression tests for the request edge (issue 24, second probe): rate limits that cannot
be turned on their owners, proxy trust, the guard's route table, body limits, names.
Each test names the finding it closes. Servers are real (uvicorn in a thread)."""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from podfleet.api.guard import AUTHENTICATED, GuardConfig
from podfleet.api.proxies import parse_trusted_proxies
from podfleet.api.routemap import RouteMap, operations
from podfleet.api.server import guard_config
from podfleet.cli.output import OutputFormat, cell, emit
from podfleet.errors import InvalidInputError
from podfleet.sdk.client import PodfleetClient
from podfleet.security.text import unprintable, visible
from podfleet.settings import Settings
from tests.security.conftest import Api, serve

BOGUS = {"Authorization": "Bearer pf_bogus-token-of-an-attacker"}


# --- finding 4: failures cannot lock out a valid token; X-Forwarded-For --------------------

def test_failures_from_an_address_never_refuse_a_valid_token(tmp_path: Path) -> None:
    for api in serve(tmp_path, GuardConfig(auth_fail_rate_per_s=0.01, auth_fail_burst=60)):
        with httpx.Client(base_url=api.url, headers=BOGUS) as c:
            codes = [c.get("/v1/clusters").status_code for _ in range(61)]
        assert codes[:60] == [401] * 60 and codes[60] == 429  # the flood is slowed...
        with api.client("admin") as ok:  # ...never the admin sending from the same address
            assert [ok.get("/v1/tokens").status_code for _ in range(5)] == [200] * 5
        with api.client("viewer") as ok:
            assert ok.get("/v1/clusters").status_code == 200


def test_x_forwarded_for_is_ignored_unless_a_trusted_proxy_sends_it(tmp_path: Path) -> None:
    for api in serve(tmp_path, GuardConfig(auth_fail_rate_per_s=0.01, auth_fail_burst=10, denial_window_s=0)):
        # From loopback, not a configured proxy: rotating the header buys no fresh buckets...
        codes = [httpx.get(f"{api.url}/v1/clusters", headers={**BOGUS, "X-Forwarded-For": f"198.51.100.{i}"})
                 .status_code for i in range(20)]
        assert codes[:10] == [401] * 10 and set(codes[10:]) == {429}
        # ...and naming a victim's address spends nothing of the victim's.
        assert {r.detail["client"] for r in api.denied()} == {"127.0.0.1"}


def test_a_trusted_proxy_names_the_client(tmp_path: Path) -> None:
    config = GuardConfig(auth_fail_rate_per_s=0.01, auth_fail_burst=5, denial_window_s=0,
                         trusted_proxies=("127.0.0.0/8",))
    for api in serve(tmp_path, config):
        def get(client: str, headers: dict[str, str], url: str = api.url) -> int:
            return httpx.get(f"{url}/v1/clusters", headers={**headers, "X-Forwarded-For": client}).status_code

        assert [get("203.0.113.7", BOGUS) for _ in range(7)] == [401] * 5 + [429] * 2
        assert get("203.0.113.8", BOGUS) == 401  # another client behind the proxy has its own slots
        assert get("203.0.113.7", {"Authorization": f"Bearer {api.tokens['viewer']}"}) == 200
        assert {r.detail["client"] for r in api.denied()} == {"203.0.113.7", "203.0.113.8"}


def test_trusted_proxies_setting_is_checked() -> None:
    assert parse_trusted_proxies(" 10.0.0.5, 10.1.2.3/16 ,::1") == ("10.0.0.5", "10.1.0.0/16", "::1")
    assert parse_trusted_proxies(None) == parse_trusted_proxies("") == ()
    with pytest.raises(InvalidInputError, match=r"'proxy\.example' is not an IP address or CIDR"):
        parse_trusted_proxies("10.0.0.1,proxy.example")
    assert guard_config(Settings(trusted_proxies="10.0.0.0/8")).trusted_proxies == ("10.0.0.0/8",)
    assert guard_config(Settings()).trusted_proxies == ()  # default: none


def test_a_malformed_trusted_proxy_stops_up_before_anything_is_made(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from podfleet.cli.main import app

    db = tmp_path / "pf.db"
    r = CliRunner().invoke(app, ["up", "--db", f"sqlite:///{db}", "--port", "0"],
                           env={"PODFLEET_TRUSTED_PROXIES": "10.0.0.1,proxy.example",
                                "PODFLEET_KEY_DIR": str(tmp_path / "keys")})
    assert r.exit_code == 2 and "'proxy.example' is not an IP address or CIDR" in r.stderr
    assert not db.exists()  # no store, no admin token nobody was shown


# --- finding 12: the guard knows every route ---------------------------------------------

def _concrete(path: str) -> str:
    return (path.replace("{chip}", "0").replace("{rest:path}", "x/y")
            .replace("{", "").replace("}", "").replace(":path", ""))


def test_the_guard_recognises_every_route(tmp_path: Path) -> None:
    from podfleet.api.console_port import ApiConsoleAuth
    from podfleet.console import mount

    for api in serve(tmp_path, GuardConfig(denial_window_s=0, auth_fail_burst=10_000)):
        mount(api.app, ApiConsoleAuth())  # the console's routes too (its stream is authenticated by the guard)
        ops = operations(api.app.router.routes)
        guarded = {op.id for op in ops if op.path.startswith(AUTHENTICATED)}
        assert {"UploadCode", "ListClusters", "DescribeClusterHardware", "RotateKeys"} <= guarded
        routes = RouteMap()
        for op in ops:
            for method in op.methods - {"HEAD"}:
                path = _concrete(op.path)
                assert routes.operation(api.app, method, path) == op.id, (method, path)
                if op.path.startswith(AUTHENTICATED):  # anonymous: refused, audited as its operation
                    r = httpx.request(method, f"{api.url}{path}", content=b"{}")
                    assert r.status_code == 401, (method, path, r.text)
        api.flush_denials()
        actions = [r.action for r in api.store.iter_audit()]
        assert "unknown" not in actions
        assert set(actions) >= guarded
        # A path no route serves is named as such, not "unknown".
        assert httpx.get(f"{api.url}/v1/no-such-thing").status_code == 401
        api.flush_denials()
        assert list(api.store.iter_audit())[-1].action == "NoSuchRoute"


# --- finding 12: the code upload limit, and a clean 413 ------------------------------------

@pytest.fixture
def server_log() -> Iterator[io.StringIO]:
    """What uvicorn and podfleet log while the test runs (a traceback would land here)."""
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    loggers = [logging.getLogger(n) for n in ("uvicorn.error", "uvicorn", "podfleet")]
    for lg in loggers:
        lg.addHandler(handler)
    yield buf
    for lg in loggers:
        lg.removeHandler(handler)


def test_code_push_gets_the_documented_limit_and_a_clean_413(tmp_path: Path, server_log: io.StringIO) -> None:
    assert guard_config(Settings()).route_body_bytes["UploadCode"] == 64 << 20
    for api in serve(tmp_path / "w", guard_config(Settings(code_max_bytes=4 << 20))):
        src = tmp_path / "src"
        src.mkdir()
        (src / "train.py").write_text("print('hi')\n")
        (src / "weights.bin").write_bytes(os.urandom(3 << 20))  # 3 MB that gzip cannot shrink
        out = PodfleetClient(api.url, api.tokens["operator"]).push_code(str(src))
        assert out["ref"].startswith("code:") and out["bytes"] > 1 << 20

        def chunks() -> Iterator[bytes]:  # chunked: no Content-Length, counted as it arrives
            for _ in range(80):
                yield os.urandom(65536)

        r = httpx.post(f"{api.url}/v1/code", content=chunks(), timeout=30,
                       headers={"Authorization": f"Bearer {api.tokens['operator']}", "content-type": "application/gzip"})
        assert r.status_code == 413 and r.json()["code"] == "payload-too-large", r.text
        assert str(4 << 20) in r.json()["detail"] and r.headers["connection"] == "close"
        with api.client("operator") as c:
            assert c.get("/v1/clusters").status_code == 200
    assert "Traceback" not in server_log.getvalue() and "Exception" not in server_log.getvalue(), server_log.getvalue()


# --- finding 12: names refuse control characters; tables never print them raw --------------

BAD = ["nul\x00", "esc\x1b[2J", "rlo\u202eexe.txt", "line\nbreak", "c1\x85", "iso\u2066late", "zw\u200bsp"]


@pytest.mark.parametrize("bad", BAD)
def test_names_refuse_control_characters(api: Api, bad: str) -> None:
    with api.client("admin") as c:
        if c.get("/v1/clusters/names").status_code == 404:
            assert c.post("/v1/clusters", json={"name": "names", "type": "trn2-node"}).status_code == 201
        calls = [
            ("name", c.post("/v1/clusters/names/jobs", json={"model": "debug", "chips": 1, "name": bad})),
            ("name", c.post("/v1/clusters", json={"name": f"pod-{bad}", "type": "trn2-node"})),
            ("name", c.post("/v1/tokens", json={"name": f"t{bad}", "role": "viewer"})),
            ("name", c.post("/v1/users", json={"name": f"u{bad}"})),
        ]
        for field, r in calls:
            assert r.status_code == 400, r.text
            body = r.json()
            assert body["code"] == "invalid-input" and body["field"] == field, body
        detail = calls[0][1].json()["detail"]
        assert f"U+{ord(next(ch for ch in bad if unprintable(ch))):04X}" in detail and "printable" in detail
        # Nothing was created under the bad name.
        assert all(j.get("name") != bad for j in c.get("/v1/jobs").json()["jobs"])


def test_policy_statements_refuse_control_characters(api: Api) -> None:
    with api.client("admin") as c:
        assert c.post("/v1/users", json={"name": "policied"}).status_code in (201, 409)
        doc = {"Statement": [{"Sid": "a\u202eb", "Effect": "Allow", "Action": "List*"}]}
        r = c.put("/v1/users/policied/policies/inline1", json=doc)
        assert r.status_code == 400 and "U+202E" in r.json()["detail"], r.text
        assert r.json()["field"] == "Statement.0.Sid"
        # A list of actions names the item, not pydantic's name for the union member.
        doc = {"Statement": [{"Effect": "Allow", "Action": ["List*", "Get\u00adJob"]}]}
        r = c.put("/v1/users/policied/policies/inline1", json=doc)
        assert r.status_code == 400 and "U+00AD" in r.json()["detail"], r.text
        assert r.json()["field"] == "Statement.0.Action.1", r.text


def test_printable_text_is_unicode_but_never_control() -> None:
    assert unprintable("llama 3 — run ñ 学习 🚀") is None
    assert unprintable("a\x7fb") == "U+007F control character"
    assert visible("ok\x1b[31m\u202e\n") == "ok\\x1b[31m\\u202e\\x0a"
    assert cell({"name": "x\x00y"}) == "name=x\\x00y"
    # The schema's pattern is the same rule (every character but lone surrogates, which no
    # regular expression class can name), written in escapes JavaScript reads alike.
    import re

    from podfleet.security.text import printable_pattern

    pattern = re.compile(printable_pattern())
    assert "\\U" not in printable_pattern()
    for n in range(0x10000):
        if not 0xD800 <= n <= 0xDFFF:
            assert (pattern.fullmatch(f"a{chr(n)}b") is None) == (unprintable(chr(n)) is not None), hex(n)
    assert unprintable("flag \U0001f3f4\U000e0067\U000e0062\U000e007f") is None  # an emoji tag sequence


def test_the_schema_states_which_names_are_refused(api: Api) -> None:
    from podfleet.security.text import printable_pattern

    doc = httpx.get(f"{api.url}/openapi.json").json()
    name = doc["components"]["schemas"]["SubmitJobRequest"]["properties"]["name"]["anyOf"][0]
    assert name["pattern"] == printable_pattern() and name["maxLength"] == 63


def test_tables_never_print_control_characters(api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    # A job stored under such a name (submitted before names were checked, or not through the API).
    plane = api.plane
    with api.client("admin") as c:
        if c.get("/v1/clusters/tables").status_code == 404:
            assert c.post("/v1/clusters", json={"name": "tables", "type": "trn2-node"}).status_code == 201
    evil = "job\x1b]0;owned\x07\u202etxt.exe\x00"
    view = plane.call_sync(plane.jobs.submit, "tables", {"model": "debug", "chips": 1, "steps": 10**8, "name": evil},
                           actor="test")
    from typer.testing import CliRunner

    from podfleet.cli.main import app

    r = CliRunner().invoke(app, ["job", "list", "--cluster", "tables"],
                           env={"PODFLEET_URL": api.url, "PODFLEET_TOKEN": api.tokens["admin"]})
    assert r.exit_code == 0, r.stderr
    assert view["id"] in r.stdout
    assert "\x1b" not in r.stdout and "\u202e" not in r.stdout and "\x00" not in r.stdout and "\x07" not in r.stdout
    assert "job\\x1b]0;owned\\x07\\u202etxt.exe\\x00" in r.stdout
    emit({"name": evil, "nested": {"k\x1b": evil}}, OutputFormat.table)
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u202e" not in out and out.count("\\u202e") == 2
    emit([{"name": evil}], OutputFormat.json)  # JSON stays exact (escaped by JSON itself)
    assert json.loads(capsys.readouterr().out) == [{"name": evil}]


# --- finding 10: every API stream ends when its token is revoked ---------------------------

def test_a_cluster_log_stream_ends_when_its_token_is_revoked(api: Api) -> None:
    import threading
    import time

    with api.client("admin") as c:
        assert c.post("/v1/clusters", json={"name": "deploying", "type": "trn2-node"}).status_code == 201
        deadline = time.monotonic() + 20
        while c.get("/v1/clusters/deploying").json()["state"] == "deploying" and time.monotonic() < deadline:
            time.sleep(0.05)
    plane = api.plane
    rt = plane.resolve("deploying")

    def reopen() -> None:  # deployed; reopened as while it ran, so a follower waits for more
        rt.logs.closed = False

    plane.call_sync(reopen)
    tid, tok = api.add_token("viewer", "cluster-watcher")
    events: list[str] = []

    def follow() -> None:
        with httpx.stream("GET", f"{api.url}/v1/clusters/deploying/logs", params={"follow": "true"},
                          headers={"Authorization": f"Bearer {tok}"}, timeout=30) as r:
            events.extend(r.iter_lines())

    t = threading.Thread(target=follow, daemon=True)
    t.start()
    time.sleep(1.0)
    assert t.is_alive(), events[-3:]
    with api.client("admin") as c:
        assert c.delete(f"/v1/tokens/{tid}").status_code == 200
    t.join(timeout=10)
    assert not t.is_alive(), "the stream outlived its token"
    assert any("token revoked" in e for e in events)
