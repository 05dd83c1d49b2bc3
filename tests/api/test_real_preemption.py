"""Preemption on a local cluster loses no work: the plane asks the victim's gang for an
on-demand checkpoint, waits until it is written and reported, stops the gang, and the
job later resumes from the very step it was preempted at.

A queue reclaiming the chip it lent is the preemptor (reclaim has no minimum run time,
unlike priority preemption's 15 minutes). The victim's periodic checkpoints are too far
apart to be taken during the test, so the checkpoint it resumes from can only be the
on-demand one.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from podfleet.api.server import bootstrap_admin
from podfleet.api.testing import serve_in_thread
from podfleet.compose import build
from podfleet.engine.timeline import Timeline
from podfleet.store.memory import MemoryStore
from tests.api.test_real_health import wait

pytestmark = pytest.mark.realproc

TOKEN = "pf_test-admin-token-0123456789abcdef"
OPTS = {"seed": 3, "global_batch": 8, "seq_len": 32, "step_delay_s": 0.05}


@pytest.fixture(scope="module")
def c(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    parts = build(MemoryStore(), Timeline(seed=1, speed=1.0), telemetry_interval_s=0.5,
                  workdir=str(tmp_path_factory.mktemp("work")))
    bootstrap_admin(parts.plane, TOKEN)
    with serve_in_thread(parts.plane, parts=parts) as url:
        client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
        r = client.post("/v1/clusters", json={"name": "loc", "fabric": "local", "chips": 2, "spares": 0})
        assert r.status_code == 201, r.text
        wait(lambda: client.get("/v1/clusters/loc").json()["state"] == "active", 30)
        for name in ("team-a", "team-b"):
            r = client.post("/v1/clusters/loc/queues", json={"name": name, "nominal": 1, "cohort": "research"})
            assert r.status_code == 201, r.text
        yield client
        client.close()


def job(c: httpx.Client, job_id: str) -> dict:
    return dict(c.get(f"/v1/jobs/{job_id}").json())


def logs(c: httpx.Client, job_id: str) -> str:
    return "\n".join(ln["message"] for ln in c.get(f"/v1/jobs/{job_id}/logs").json()["lines"])


def submit(c: httpx.Client, **body: Any) -> str:
    r = c.post("/v1/clusters/loc/jobs", json=body)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def test_a_preempted_local_job_resumes_from_the_step_it_was_preempted_at(c: httpx.Client) -> None:
    # Team b borrows team a's idle chip: a 2-rank job on both slots.
    victim = submit(c, model="debug", chips=2, steps=70, checkpoint_interval=1000, queue="team-b", options=OPTS)
    wait(lambda: job(c, victim)["state"] == "RUNNING" and job(c, victim)["progress"].get("step", 0) >= 8, 120)
    # Team a wants its chip back: the borrower is preempted.
    owner = submit(c, model="debug", chips=1, steps=5, queue="team-a", priority=60, options=OPTS)
    wait(lambda: job(c, victim)["state"] == "PENDING" and job(c, victim)["scheduling"]["preemptions"] == 1,
         timeout_s=120, show=lambda: (job(c, owner), logs(c, victim)))
    v = job(c, victim)
    text = logs(c, victim)
    assert "asked for an on-demand checkpoint" in text, text
    assert "not reported within" not in text, text
    saved = int(v["checkpoint_step"])
    # The checkpoint is the on-demand one (no periodic one is due) and holds every step
    # the job reported: the gang held at that step boundary until it was stopped.
    assert 8 <= saved < 70, v
    assert int(v["progress"]["step"]) == saved, v
    assert f"resumes from checkpoint step {saved}" in text, text
    # Team a's job runs and ends; the borrower gets the chip back and resumes from there.
    wait(lambda: job(c, owner)["state"] == "SUCCEEDED", 120)
    wait(lambda: job(c, victim)["state"] == "SUCCEEDED", 180)
    text = logs(c, victim)
    restored = [int(m) for m in re.findall(r"restored step (\d+)", text)]
    assert restored and restored[-1] == saved, text
    assert int(job(c, victim)["progress"]["step"]) == 70
