"""The operations surfaces end to end: REST (VerifyCluster, DiagnoseCluster,
GetRecommendations, ApplyRecommendation, ListGuides, GetGuide) and the CLI over it."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from typer.testing import CliRunner

from podfleet.cli.main import app
from tests.api.conftest import ADMIN_TOKEN, Live, start_live, wait_active

runner = CliRunner()


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    yield from start_live()


@pytest.fixture(scope="module")
def admin(live: Live) -> Iterator[httpx.Client]:
    with live.client("admin") as c:
        assert c.post("/v1/clusters", json={"name": "ops", "type": "trn2-ultraserver", "spares": 2}).status_code < 300
        wait_active(c, "ops")
        yield c


def cli(live: Live, *args: str) -> object:
    return runner.invoke(app, [*args, "--url", live.url, "--token", ADMIN_TOKEN])


def test_verify_over_the_api_with_the_drill(admin: httpx.Client) -> None:
    r = admin.post("/v1/clusters/ops/verify", json={"max_size_bytes": 1 << 20, "ops": ["all-reduce", "send-recv"]},
                   timeout=120)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["passed"] and [c["name"] for c in out["checks"]] == ["inventory", "compute", "interconnect", "drill"]
    assert out["checks"][3]["figures"]["rehearsed"] is True
    bad = admin.post("/v1/clusters/ops/verify", json={"ops": ["broadcast"]})
    assert bad.status_code == 400 and "all-reduce" in bad.json()["detail"]


def test_verify_cli_exits_non_zero_on_a_failure(live: Live, admin: httpx.Client) -> None:
    ok = cli(live, "verify", "ops", "--max-size", "64KiB", "--skip-drill", "--output", "json")
    assert ok.exit_code == 0, ok.stderr
    assert json.loads(ok.stdout)["passed"] is True
    assert admin.post("/v1/clusters/ops/faults", json={"kind": "link-down", "link": "0-1"}).status_code < 300
    failed = cli(live, "verify", "ops", "--max-size", "64KiB", "--skip-drill")
    assert failed.exit_code == 1 and "FAILED" in failed.stderr
    assert "interconnect" in failed.stdout
    bad = cli(live, "verify", "ops", "--max-size", "lots")
    assert bad.exit_code == 2 and "not a size" in bad.stderr
    unknown = cli(live, "verify", "nope", "--skip-drill")
    assert unknown.exit_code == 3 and "not found" in unknown.stderr


def test_diagnose_names_the_link_and_its_runbook(live: Live, admin: httpx.Client) -> None:
    admin.post("/v1/clusters/ops/faults", json={"kind": "link-down", "link": "0-1"})
    r = admin.get("/v1/clusters/ops/diagnosis")
    assert r.status_code == 200
    f = next(f for f in r.json()["findings"] if f["links"] == ["0-1"])
    assert f["kind"] == "link-down" and f["runbook"] == "runbook-link-down"
    guide = admin.get(f"/v1/kb/{f['runbook']}")
    assert guide.status_code == 200 and guide.json()["title"].startswith("Runbook")
    out = cli(live, "diagnose", "ops")
    assert out.exit_code == 0 and "podfleet docs runbook-link-down" in out.stdout


def test_advice_and_apply_surfaces(live: Live, admin: httpx.Client) -> None:
    r = admin.get("/v1/clusters/ops/recommendations", timeout=120)
    assert r.status_code == 200 and r.json()["min_gain"] == 0.02
    missing = admin.post("/v1/recommendations/adv-0000000000/apply")
    assert missing.status_code == 404
    out = cli(live, "advise", "apply", "adv-0000000000")
    assert out.exit_code == 3 and "advise" in out.stderr
    viewer = live.client("viewer")
    assert viewer.post("/v1/recommendations/adv-0000000000/apply").status_code == 403
    assert viewer.post("/v1/clusters/ops/verify", json={}).status_code == 403


def test_docs_list_and_read() -> None:
    r = runner.invoke(app, ["docs", "--output", "json"])
    assert r.exit_code == 0
    topics = {g["topic"] for g in json.loads(r.stdout)}
    assert {"configuring-parallelism", "tuning-throughput", "troubleshooting-a-link",
            "reading-a-health-report", "runbook-link-down"} <= topics
    one = runner.invoke(app, ["docs", "runbook-chip-failure"])
    assert one.exit_code == 0 and "replace" in one.stdout
    bad = runner.invoke(app, ["docs", "nope"])
    assert bad.exit_code == 3 and "runbook-link-down" in bad.stderr


def test_health_reports_are_created_listed_and_downloaded(live: Live, admin: httpx.Client, tmp_path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PODFLEET_WORKDIR", str(tmp_path))
    r = admin.post("/v1/clusters/ops/reports", json={"period": "1h"}, timeout=60)
    assert r.status_code == 201, r.text
    rid = r.json()["id"]
    listed = admin.get("/v1/clusters/ops/reports").json()["reports"]
    assert rid in [x["id"] for x in listed]
    page = admin.get(f"/v1/clusters/ops/reports/{rid}", params={"format": "html"})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html") and "<svg" in page.text
    assert admin.post("/v1/clusters/ops/reports", json={"period": "2w"}).status_code == 400
    out = tmp_path / "report.html"
    res = cli(live, "report", "ops", "--period", "1h", "--format", "html", "--out", str(out))
    assert res.exit_code == 0, res.stderr
    assert out.read_text().startswith("<!doctype html>") and (out.stat().st_mode & 0o777) == 0o600
    listing = cli(live, "report", "ops", "--list", "--output", "json")
    assert listing.exit_code == 0 and len(json.loads(listing.stdout)) == 2
