"""The job option grad_compression: through the API to the job's spec and the twin's run."""

from __future__ import annotations

import time

import httpx

from podfleet.fabric.base import Introspection
from tests.api.conftest import Live, wait_active


def test_grad_compression_reaches_the_twin_run_and_a_bad_mode_is_named(live: Live, admin: httpx.Client) -> None:
    assert admin.post("/v1/clusters", json={"name": "gc-pod", "type": "trn2-ultraserver"}).status_code == 201
    view = wait_active(admin, "gc-pod")
    r = admin.post("/v1/clusters/gc-pod/jobs", json={"model": "llama3-8b", "chips": 16, "steps": 10,
                                                       "grad_compression": "powersgd:4"})
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["grad_compression"] == "powersgd:4"
    fabric = live.plane.clusters[view["id"]].fabric
    assert isinstance(fabric, Introspection)
    deadline = time.monotonic() + 20
    while fabric.run_status(job["id"]) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    # The twin's run was launched with the mode, so its step time models it.
    assert fabric.job(job["id"]).spec.options["grad_compression"] == "powersgd:4"  # type: ignore[attr-defined]
    bad = admin.post("/v1/clusters/gc-pod/jobs", json={"model": "llama3-8b", "chips": 16, "grad_compression": "gzip"})
    assert bad.status_code == 400, bad.text
    assert bad.json()["field"] == "grad_compression"
