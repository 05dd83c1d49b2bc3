"""The health / firmware API and /metrics on a live server (paced timeline, in-memory store)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from podfleet.api.server import bootstrap_admin
from podfleet.api.testing import serve_in_thread
from podfleet.compose import build
from podfleet.engine.timeline import Timeline
from podfleet.store.memory import MemoryStore

TOKEN = "pf_test-admin-token-health-0123456789"


@pytest.fixture(scope="module")
def api() -> Iterator[httpx.Client]:
    parts = build(MemoryStore(), Timeline(seed=5, speed=50.0), telemetry_interval_s=1.0)
    plane = parts.plane
    bootstrap_admin(plane, TOKEN)
    with serve_in_thread(plane, parts=parts) as url, httpx.Client(base_url=url, timeout=30,
                                                     headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        r = c.post("/v1/clusters", json={"name": "hpod", "type": "trn2-ultraserver", "spares": 4})
        assert r.status_code == 201, r.text
        deadline = time.monotonic() + 20
        while c.get("/v1/clusters/hpod").json()["state"] != "active" and time.monotonic() < deadline:
            time.sleep(0.1)
        yield c


def test_alerts_telemetry_and_hardware_health(api: httpx.Client) -> None:
    r = api.post("/v1/clusters/hpod/faults", json={"kind": "link-down", "link": "0-1"})
    assert r.status_code < 300, r.text
    deadline = time.monotonic() + 10
    alerts: list = []
    while time.monotonic() < deadline and not alerts:
        alerts = api.get("/v1/clusters/hpod/alerts", params={"state": "firing"}).json()["alerts"]
        time.sleep(0.1)
    assert any(a["rule"] == "link-down" for a in alerts)
    ack = api.post(f"/v1/alerts/{alerts[0]['id']}/acknowledge")
    assert ack.status_code == 200 and ack.json()["state"] == "acknowledged", ack.text
    # Acknowledged, as listed: every *_at is RFC 3339 (the timeline seconds beside).
    a = ack.json()
    assert a["first_seen_at"].endswith("Z") and a["last_seen_at"].endswith("Z") and a["resolved_at"] is None
    assert isinstance(a["first_seen"], float) and a["resolved_t"] is None
    again = api.post(f"/v1/alerts/{alerts[0]['id']}/acknowledge")
    assert again.status_code == 409 and again.headers["content-type"].startswith("application/problem+json")
    tel = api.get("/v1/clusters/hpod/telemetry", params={"metric": "temperature_c", "range": "realtime", "target": 2})
    assert tel.status_code == 200 and tel.json()["t"]
    bad = api.get("/v1/clusters/hpod/telemetry", params={"metric": "nope"})
    assert bad.status_code == 400 and "temperature_c" in bad.json()["detail"]
    hw = api.get("/v1/clusters/hpod/hardware").json()
    assert {c["health"] for c in hw["chips"]} <= {"ok", "warning", "critical"}


def test_firmware_update_api_and_bad_input(api: httpx.Client) -> None:
    bad = api.post("/v1/clusters/hpod/firmware", json={"version": "0.0.1"})
    assert bad.status_code == 400 and "2.22.0" in bad.json()["detail"]
    assert api.get("/v1/clusters/hpod/firmware").json()["rollouts"] == []
    r = api.post("/v1/clusters/hpod/firmware", json={"version": "2.22.0", "chips": [0, 1]})
    assert r.status_code == 202, r.text
    busy = api.post("/v1/clusters/hpod/firmware", json={"version": "2.23.0"})
    assert busy.status_code == 409
    got = api.get(f"/v1/clusters/hpod/firmware/{r.json()['id']}").json()
    assert got["version"] == "2.22.0" and 0.0 <= got["progress"] <= 1.0
    assert api.get("/v1/clusters/hpod/firmware/fw-9999").status_code == 404


def test_metrics_follow_prometheus_conventions(api: httpx.Client) -> None:
    text = api.get("/metrics").text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("podfleet_chip_temperature_celsius", "podfleet_chip_power_watts", "podfleet_chip_hbm_used_bytes",
                 "podfleet_chip_utilization_ratio", "podfleet_link_utilization_ratio", "podfleet_chip_clock_hertz"):
        assert fams[name].type == "gauge" and fams[name].samples, name
    # Counters are exposed with the _total suffix the conventions ask for.
    assert fams["podfleet_chip_hbm_ecc_corrected"].type == "counter"
    assert any(s.name == "podfleet_link_errors_total" for s in fams["podfleet_link_errors"].samples)
    assert "podfleet_health_scans" in fams and "podfleet_alerts" in fams
    temps = [s.value for s in fams["podfleet_chip_temperature_celsius"].samples]
    assert len(temps) == 64 and all(20 < t < 110 for t in temps)


def test_cli_alerts_and_firmware(api: httpx.Client) -> None:
    import json

    from typer.testing import CliRunner

    from podfleet.cli.main import app

    env = {"PODFLEET_URL": str(api.base_url), "PODFLEET_TOKEN": TOKEN}
    run = CliRunner().invoke
    r = run(app, ["alerts", "list", "hpod", "--output", "json"], env=env)
    assert r.exit_code == 0, r.output
    assert isinstance(json.loads(r.stdout), list)
    r = run(app, ["firmware", "update", "hpod", "--version", "7.7.7", "--output", "json"], env=env)
    assert r.exit_code == 2 and "2.22.0" in r.output
    r = run(app, ["firmware", "status", "hpod", "--output", "json"], env=env)
    assert r.exit_code == 0 and isinstance(json.loads(r.stdout), list)
    r = run(app, ["alerts", "recoveries", "hpod", "--output", "json"], env=env)
    assert r.exit_code == 0, r.output
    r = run(app, ["alerts", "list", "--output", "json"], env=env)  # every cluster's
    assert r.exit_code == 0 and all(a["cluster"] == "hpod" for a in json.loads(r.stdout)), r.output
    r = run(app, ["alerts", "ack", "al-nope", "--cluster", "hpod"], env=env)
    assert r.exit_code == 3 and "is not an alert of cluster hpod" in r.stderr, r.output
    assert "--reason" in run(app, ["chip", "drain", "-h"]).stdout
    assert "2.22.0" in " ".join(run(app, ["firmware", "update", "-h"]).stdout.split())


def test_job_shows_its_recovery_through_the_api(api: httpx.Client) -> None:
    r = api.post("/v1/clusters/hpod/jobs", json={"model": "debug", "chips": 16, "steps": 10**7,
                                                "parallelism": {"tp": 8, "pp": 1, "dp": 2}})
    assert r.status_code == 201, r.text
    job = r.json()["id"]
    deadline = time.monotonic() + 15
    while api.get(f"/v1/jobs/{job}").json()["state"] != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.1)
    chip = api.get(f"/v1/jobs/{job}").json()["allocation"]["chips"][2]
    assert api.post("/v1/clusters/hpod/faults", json={"kind": "chip-failure", "chip": chip}).status_code < 300
    deadline = time.monotonic() + 15
    rec = None
    while time.monotonic() < deadline and not (rec and rec["state"] == "done"):
        rec = api.get(f"/v1/jobs/{job}").json().get("recovery")
        time.sleep(0.1)
    assert rec and rec["state"] == "done" and [s["name"] for s in rec["steps"]][-1] == "resume"
    # Running again (a periodic checkpoint may be in flight when we look).
    assert api.get(f"/v1/jobs/{job}").json()["state"] in ("RUNNING", "CHECKPOINTING")
