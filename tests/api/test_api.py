"""The REST API end to end: lifecycle, problems, idempotency, SSE, pagination, metrics."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from podfleet.hardware.catalog import get_topology
from podfleet.scheduler import choose_spares
from tests.api.conftest import Live, wait_active


@pytest.fixture(scope="module")
def pod(admin: httpx.Client) -> dict:
    r = admin.post("/v1/clusters", json={"name": "pod", "type": "trn2-ultraserver", "spares": 2})
    assert r.status_code == 201, r.text
    return wait_active(admin, "pod")


def test_slice_cluster_job_progress(admin: httpx.Client, pod: dict) -> None:
    # Spares are chosen where they keep the largest blocks free (podfleet.scheduler.choose_spares).
    assert pod["state"] == "active" and pod["spares"] == list(choose_spares(get_topology("trn2-ultraserver"), 2))
    r = admin.post("/v1/clusters/pod/jobs", json={"model": "debug", "chips": 8, "steps": 10**6,
                                                  "checkpoint_interval": 1000})
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["id"].startswith("job-") and job["state"] == "RUNNING"
    assert len(job["allocation"]["chips"]) == 8 and job["allocation"]["shape"]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        d = admin.get(f"/v1/jobs/{job['id']}").json()
        if d["progress"]["step"] > 0:
            break
        time.sleep(0.05)
    assert d["progress"]["step"] > 0 and d["progress"]["tokens_per_s"] > 0 and d["progress"]["loss"]
    stopped = admin.post(f"/v1/jobs/{job['id']}/stop").json()
    assert stopped["state"] == "STOPPED"
    again = admin.post(f"/v1/jobs/{job['id']}/stop")
    assert again.status_code == 409 and again.json()["code"] == "conflict"


def test_hardware_snapshot(admin: httpx.Client, pod: dict) -> None:
    hw = admin.get("/v1/clusters/pod/hardware").json()
    assert len(hw["chips"]) == 64 and len(hw["links"]) == 192
    chip = hw["chips"][5]
    assert {"index", "coords", "state", "spare", "metrics"} <= set(chip)
    assert chip["coords"] == [1, 1, 0]
    assert [c["index"] for c in hw["chips"] if c["spare"]] == pod["spares"]
    assert "temperature_c" in chip["metrics"]
    link = hw["links"][0]
    assert {"src", "dst", "axis", "state", "metrics"} <= set(link) and link["axis"] == "x"
    one = admin.get("/v1/clusters/pod/hardware", params={"chip": 7}).json()
    assert one["index"] == 7
    r = admin.get("/v1/clusters/pod/hardware", params={"chip": 64})
    assert r.status_code == 404 and r.json()["field"] == "chip"


BAD = [
    ("post", "/v1/clusters", {"name": "x", "spares": 5}, 400, "spares", "0-4"),
    ("post", "/v1/clusters", {"name": "x", "type": "tpu"}, 400, "type",
     ["trn2-ultraserver", "trn2-node", "trn1-node", "custom"]),
    # Each field is valid, the combination is not: 422 (400 means the schema was broken).
    ("post", "/v1/clusters", {"name": "x", "chips": 10}, 422, "chips", [64]),
    ("post", "/v1/clusters", {"name": "x", "fabric": "slurm"}, 400, "fabric", ["sim", "local", "ray", "neuron"]),
    ("post", "/v1/clusters", {"spares": 1}, 400, "name", None),
    ("post", "/v1/clusters/pod/jobs", {"model": "debug", "chips": 63}, 422, "chips", "1-62"),
    ("post", "/v1/clusters/pod/jobs", {"model": "nope", "chips": 4}, 400, "model", None),
    ("post", "/v1/clusters/pod/jobs", {"model": "debug", "chips": "many"}, 400, "chips", None),
    ("post", "/v1/clusters/pod/jobs", {"model": "debug", "chips": 4, "parallelism": {"tp": 3, "pp": 1, "dp": 1}},
     422, "parallelism", None),
    ("post", "/v1/clusters/ghost/jobs", {"model": "debug", "chips": 4}, 404, "cluster", None),
    ("get", "/v1/jobs/job-ghost", None, 404, "job", None),
    ("get", "/v1/clusters/ghost", None, 404, "cluster", None),
    ("post", "/v1/clusters/pod/faults", {"kind": "meteor", "chip": 1}, 400, "kind", None),
    ("post", "/v1/clusters/pod/faults", {"kind": "link-down", "link": "0-2"}, 404, "link", None),
    ("post", "/v1/clusters/pod/faults", {"kind": "chip-failure", "chip": 99}, 404, "chip", None),
    ("get", "/v1/jobs?max_results=0", None, 400, "max_results", "1-1000"),
]


@pytest.mark.parametrize("method,path,body,status,field,allowed", BAD)
def test_bad_input_is_problem_json(admin: httpx.Client, pod: dict, method: str, path: str,
                                   body: dict | None, status: int, field: str, allowed: object) -> None:
    n_clusters = len(admin.get("/v1/clusters").json()["clusters"])
    n_jobs = len(admin.get("/v1/jobs").json()["jobs"])
    r = admin.request(method, path, json=body)
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    p = r.json()
    assert {"type", "title", "status", "detail", "code"} <= set(p) and p["status"] == status
    assert p["field"] == field
    if allowed is not None:
        assert p["allowed"] == allowed
    assert len(admin.get("/v1/clusters").json()["clusters"]) == n_clusters
    assert len(admin.get("/v1/jobs").json()["jobs"]) == n_jobs


def test_unknown_route_and_method_are_problems(admin: httpx.Client) -> None:
    r = admin.get("/v1/nothing-here")
    assert r.status_code == 404 and r.json()["code"] == "not-found"
    r = admin.put("/v1/clusters")
    assert r.status_code == 405 and r.json()["code"] == "method-not-allowed"
    r = admin.post("/v1/clusters", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["code"] == "invalid-input"


def test_idempotent_create_and_submit(admin: httpx.Client, pod: dict) -> None:
    body = {"name": "idem", "type": "trn2-node", "client_token": "retry-1"}
    a, b = admin.post("/v1/clusters", json=body), admin.post("/v1/clusters", json=body)
    assert a.status_code == b.status_code == 201 and a.json()["id"] == b.json()["id"]
    c = admin.post("/v1/clusters", json={**body, "spares": 1})
    assert c.status_code == 409 and c.json()["field"] == "client_token"
    names = [x["name"] for x in admin.get("/v1/clusters").json()["clusters"]]
    assert names.count("idem") == 1
    jb = {"model": "debug", "chips": 2, "client_token": "job-retry"}
    j1, j2 = admin.post("/v1/clusters/pod/jobs", json=jb), admin.post("/v1/clusters/pod/jobs", json=jb)
    assert j1.json()["id"] == j2.json()["id"]
    assert admin.post("/v1/clusters/pod/jobs", json={**jb, "chips": 3}).status_code == 409


def test_pagination(admin: httpx.Client, pod: dict) -> None:
    for i in range(3):
        admin.post("/v1/clusters/pod/jobs", json={"model": "debug", "chips": 1, "steps": 5, "name": f"p{i}"})
    seen, token = [], None
    while True:
        params = {"max_results": 2, **({"next_token": token} if token else {})}
        page = admin.get("/v1/jobs", params=params).json()
        assert len(page["jobs"]) <= 2
        seen += [j["id"] for j in page["jobs"]]
        token = page["next_token"]
        if not token:
            break
    assert len(seen) == len(set(seen)) == len(admin.get("/v1/jobs", params={"max_results": 1000}).json()["jobs"])


def test_deployment_sse(admin: httpx.Client) -> None:
    assert admin.post("/v1/clusters", json={"name": "sse", "type": "trn2-node"}).status_code == 201
    events = []
    with admin.stream("GET", "/v1/clusters/sse/logs", params={"follow": "true"}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        kind = None
        for line in r.iter_lines():
            if line.startswith("event:"):
                kind = line[6:].strip()
            elif line.startswith("data:"):
                events.append((kind, json.loads(line[5:])))
                if kind == "end":
                    break
    kinds = [k for k, _ in events]
    assert kinds[-1] == "end" and "progress" in kinds
    messages = [d["message"] for k, d in events if k == "log"]
    assert any("self-test" in m for m in messages)
    assert [d for k, d in events if k == "progress"][-1]["percent"] == 100


def test_healthz_and_metrics(live: Live, admin: httpx.Client, pod: dict) -> None:
    assert httpx.get(f"{live.url}/healthz").json()["ok"] is True
    text = httpx.get(f"{live.url}/metrics").text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert "podfleet_api_requests" in fams and "podfleet_api_request_duration_seconds" in fams
    assert any(s.labels.get("state") == "active" for s in fams["podfleet_clusters"].samples)
    ops = {s.labels.get("operation") for s in fams["podfleet_api_requests"].samples}
    assert "DescribeCluster" in ops


def test_fault_moves_job_via_api(admin: httpx.Client, pod: dict) -> None:
    job = admin.post("/v1/clusters/pod/jobs", json={"model": "debug", "chips": 4, "steps": 10**6}).json()
    victim = job["allocation"]["chips"][0]
    r = admin.post("/v1/clusters/pod/faults", json={"kind": "chip-failure", "chip": victim})
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        d = admin.get(f"/v1/jobs/{job['id']}").json()
        if "RECOVERING" in d["timestamps"] and d["state"] == "RUNNING":
            break
        time.sleep(0.05)
    assert d["state"] == "RUNNING" and victim not in d["allocation"]["chips"]
    logs = admin.get(f"/v1/jobs/{job['id']}/logs").json()["lines"]
    assert any("recovery" in ln["message"] for ln in logs)
