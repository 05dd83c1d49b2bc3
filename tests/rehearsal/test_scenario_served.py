"""A rehearsal (``podfleet sim``) and a served control plane given the same commands over
HTTP take the same recovery path: same flows, same steps, same order."""

from __future__ import annotations

import time
from typing import Any

import httpx

from podfleet.api.server import bootstrap_admin
from podfleet.api.testing import serve_in_thread
from podfleet.compose import build
from podfleet.engine.timeline import Timeline
from podfleet.rehearsal.rehearsal import rehearse
from podfleet.rehearsal.scenario import parse_scenario
from podfleet.store.memory import MemoryStore

TOKEN = "pf_test-admin-token-0123456789abcdef"
JOB = {"model": "llama3-8b", "chips": 32, "steps": 10**6, "checkpoint_interval": 100,
       "parallelism": {"tp": 16, "pp": 1, "dp": 2}}
SCENARIO = {"name": "served", "seed": 2, "duration": "3m", "fault_rates": "none", "spares": 4,
            "jobs": [{"id": "j", **JOB}],
            "commands": [{"at": "60s", "fault": {"kind": "chip-failure", "job": "j", "rank": 3}},
                         {"at": "90s", "fault": {"kind": "link-down", "link": "0-1"}}]}


def _flows(journals: list[dict[str, Any]]) -> list[tuple[str, str | None, list[str]]]:
    return [(j["kind"], j.get("restored_from"), [s["name"] for s in j["steps"]]) for j in journals]


def _wait(fn: Any, what: str, timeout_s: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = fn()
        if out:
            return out
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_rehearsal_and_served_plane_recover_the_same_way() -> None:
    rep = rehearse(parse_scenario(SCENARIO))
    sim_seq = [(s["kind"], s["path"], s["steps"]) for s in rep["recoveries"]["sequence"] if s["job"] == "j"]
    assert sim_seq and sim_seq[0][0] == "chip-failure" and sim_seq[0][1] == "replica"
    assert all(c["result"] == "ok" for c in rep["commands"])

    parts = build(MemoryStore(), Timeline(seed=2, speed=20.0), telemetry_interval_s=2.0)
    plane = parts.plane
    bootstrap_admin(plane, TOKEN)
    with serve_in_thread(plane, parts=parts) as url, \
            httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as c:
        assert c.post("/v1/clusters", json={"name": "pod", "type": "trn2-ultraserver", "spares": 4}).status_code < 300
        _wait(lambda: c.get("/v1/clusters/pod").json()["state"] == "active", "cluster active")
        r = c.post("/v1/clusters/pod/jobs", json={"name": "j", **JOB})
        assert r.status_code < 300, r.text
        job = r.json()["id"]
        view = _wait(lambda: (v := c.get(f"/v1/jobs/{job}").json())["state"] == "RUNNING" and v, "job running")
        chip = view["allocation"]["chips"][3]
        assert c.post("/v1/clusters/pod/faults", json={"kind": "chip-failure", "chip": chip}).status_code < 300
        _wait(lambda: (v := c.get(f"/v1/jobs/{job}").json())["state"] == "RUNNING" and v.get("recovery")
              and v["recovery"]["state"] == "done", "recovery done")
        assert c.post("/v1/clusters/pod/faults", json={"kind": "link-down", "link": "0-1"}).status_code < 300
        time.sleep(0.5)  # 10 s of timeline time at 20x: the link flow (if any) finishes
        journals = plane.call_sync(parts.recovery.recoveries, "pod")
    served_seq = [f for f in _flows(journals)]
    sim_all = [(s["kind"], s["path"] if s["path"] != "none" else None, s["steps"]) for s in
               rep["recoveries"]["sequence"]]
    served_jobs = [f for f, j in zip(served_seq, journals, strict=True) if j.get("job_id") == job]
    assert [(k, p, st) for k, p, st in served_jobs] == [(k, p, st) for k, p, st in sim_all][:len(served_jobs)]
    assert served_jobs[0][0] == "chip-failure" and len(served_jobs) == len(sim_seq)
