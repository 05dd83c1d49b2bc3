"""The scheduler's surfaces over HTTP and the CLI: submit-time rejection as problem+json,
allocation and pending reasons in DescribeTrainingJob, the ``scheduler`` object in
DescribeCluster and the scheduler families on /metrics."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from podfleet.cli.main import app
from tests.api.conftest import Live, wait_active


@pytest.fixture(scope="module")
def spod(admin: httpx.Client) -> dict:
    r = admin.post("/v1/clusters", json={"name": "spod", "spares": 4, "quotas": {"ml": 40}})
    assert r.status_code == 201, r.text
    return wait_active(admin, "spod")


@pytest.mark.parametrize("body,status,words", [
    ({"model": "debug", "chips": 30}, 422, "no contiguous block of 30 chips"),
    ({"model": "debug", "chips": 64, "team": "ml", "parallelism": {"tp": 4, "pp": 1, "dp": 16}}, 422, "1-60"),
    ({"model": "debug", "chips": 48, "team": "ml"}, 422, "quota is 40"),
    ({"model": "debug", "chips": 8, "team": "ML!"}, 400, "team"),
])
def test_unsatisfiable_submit_is_a_4xx_problem(admin: httpx.Client, spod: dict, body: dict, status: int,
                                               words: str) -> None:
    before = len(admin.get("/v1/jobs", params={"cluster": "spod"}).json()["jobs"])
    r = admin.post("/v1/clusters/spod/jobs", json=body)
    assert r.status_code == status and r.headers["content-type"].startswith("application/problem+json")
    assert (words in r.json()["detail"] or words == r.json().get("allowed")) and r.json()["field"] in ("chips", "team")
    assert len(admin.get("/v1/jobs", params={"cluster": "spod"}).json()["jobs"]) == before


def test_allocation_reason_metrics(live: Live, admin: httpx.Client, spod: dict) -> None:
    big = admin.post("/v1/clusters/spod/jobs", json={"model": "debug", "chips": 32, "steps": 10**7,
                                                     "team": "ml", "parallelism": {"tp": 4, "pp": 1, "dp": 8}})
    assert big.status_code == 201, big.text
    job = big.json()
    assert job["state"] == "RUNNING" and sorted(job["allocation"]["shape"]) == [2, 4, 4]
    assert not set(job["allocation"]["chips"]) & set(spod["spares"])
    wait = admin.post("/v1/clusters/spod/jobs", json={"model": "debug", "chips": 32, "steps": 10}).json()
    d = admin.get(f"/v1/jobs/{wait['id']}").json()
    assert d["state"] == "PENDING" and d["allocation"]["reason"].startswith("Unschedulable: no free ")
    assert d["allocation"]["chips"] == [] and "queue_wait_s" in d["scheduling"]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the balance degree needs a telemetry sample of the job
        c = admin.get("/v1/clusters/spod").json()
        # Scheduler figures refresh once per telemetry tick: wait for the one after the submit.
        if c["scheduler"].get("balance_degree") and c["scheduler"].get("pending_jobs") == 1:
            break
        time.sleep(0.1)
    m = c["scheduler"]
    assert m["running_jobs"] == 1 and m["pending_jobs"] == 1 and m["spares"] == spod["spares"]
    assert m["pods"][0]["utilization"] == pytest.approx(32 / 60, abs=1e-3)
    assert m["balance_degree"][job["id"]] > 0
    fams = {f.name: f for f in text_string_to_metric_families(httpx.get(f"{live.url}/metrics").text)}
    util = [s for s in fams["podfleet_pod_utilization_ratio"].samples if s.labels["cluster"] == "spod"]
    assert util and util[0].value == pytest.approx(32 / 60, abs=1e-3)
    assert any(s.labels["cluster"] == "spod" for s in fams["podfleet_fragmentation_ratio"].samples)
    assert fams["podfleet_queue_wait_seconds"].type == "histogram"
    count = [s for s in fams["podfleet_queue_wait_seconds"].samples
             if s.name == "podfleet_queue_wait_seconds_count" and s.labels["cluster"] == "spod"]
    assert count and count[0].value >= 2
    balance = [s for s in fams["podfleet_job_balance_degree_ratio"].samples if s.labels.get("job_id") == job["id"]]
    assert balance and 0 < balance[0].value <= 1
    # The CLI shows the same: job describe (allocation) and cluster describe (scheduler).
    env = {"PODFLEET_URL": live.url, "PODFLEET_TOKEN": live.tokens["admin"]}
    r = CliRunner().invoke(app, ["job", "describe", wait["id"], "--output", "json"], env=env)
    assert r.exit_code == 0 and json.loads(r.stdout)["allocation"]["reason"].startswith("Unschedulable")
    r = CliRunner().invoke(app, ["cluster", "describe", "spod", "--output", "json"], env=env)
    assert r.exit_code == 0 and "fragmentation" in json.loads(r.stdout)["scheduler"]
    r = CliRunner().invoke(app, ["job", "submit", "spod", "--model", "debug", "--chips", "4", "--team", "ml",
                                 "--output", "json"], env=env)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["team"] == "ml"
    admin.post(f"/v1/jobs/{job['id']}/stop")


def test_cli_named_spares_and_quotas(live: Live) -> None:
    env = {"PODFLEET_URL": live.url, "PODFLEET_TOKEN": live.tokens["admin"]}
    r = CliRunner().invoke(app, ["cluster", "create", "named", "--spare-chips", "60,61,62,63", "--quota", "ml=16",
                                 "--output", "json"], env=env)
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["spares"] == [60, 61, 62, 63] and out["spec"]["quotas"] == {"ml": 16}
    r = CliRunner().invoke(app, ["cluster", "create", "bad", "--quota", "ml"], env=env)
    assert r.exit_code == 2 and "TEAM=CHIPS" in r.stderr
