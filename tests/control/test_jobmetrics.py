"""Per-job metrics history (GetJobMetrics) on the twin, in virtual time."""

from __future__ import annotations

import itertools

import pytest

from podfleet.control import ControlPlane
from podfleet.control.jobmetrics import COARSE_S, FINE_S, Bucket
from podfleet.errors import InvalidInputError
from tests.control.conftest import active_cluster, advance


def test_history_fine_then_coarse_and_kept_after_the_end(plane: ControlPlane) -> None:
    active_cluster(plane, "node", type="trn2-node")
    job = plane.jobs.submit("node", {"model": "debug", "chips": 8, "steps": 10**7}, actor="t")
    advance(plane, 60)
    early = plane.get_job_metrics(job["id"][:12])
    assert early["resolution_s"] == FINE_S and len(early["points"]) >= 5
    pts = early["points"]
    assert all(p["loss"] is not None and p["tokens_per_s"] for p in pts)
    assert all(a["step_last"] <= b["step_first"] for a, b in itertools.pairwise(pts))
    assert pts[-1]["step_time_s"] > 0  # measured from the buckets when the fabric gives none
    advance(plane, 2 * COARSE_S)
    coarse = plane.get_job_metrics(job["id"], resolution_s=COARSE_S)
    assert coarse["resolution_s"] == COARSE_S and len(coarse["points"]) >= 2
    assert plane.store.list_job_metrics(job["id"], resolution_s=COARSE_S)
    plane.jobs.stop(job["id"], actor="t")
    after = plane.get_job_metrics(job["id"])  # an ended job: its persisted history
    assert after["resolution_s"] == COARSE_S and len(after["points"]) >= len(coarse["points"])
    with pytest.raises(InvalidInputError, match="resolution must be one of 10, 300"):
        plane.get_job_metrics(job["id"], resolution_s=7)


def test_bucket_keeps_min_max_and_measures_step_time() -> None:
    b = Bucket(0.0, 10, 10, 0.0, 0.0)
    b.add(0.0, 10, {"loss": 3.0})
    b.add(5.0, 20, {"loss": 1.0})
    d = b.to_data()
    assert d["loss"] == {"avg": 2.0, "min": 1.0, "max": 3.0}
    assert d["step_time_s"]["avg"] == pytest.approx(0.5) and d["step_time_s"]["measured"]
