"""A fleet through the plane at size (issue 28): its pods deploy side by side, its
DescribeCluster counts pods rather than listing them, and its hardware snapshot builds
the chips a page asks for exactly as the whole snapshot lists them."""

from __future__ import annotations

import json
import math

import numpy as np

from podfleet.control import ControlPlane
from podfleet.control.deploy import step_durations_s
from podfleet.control.hardwareviews import ChipFilter
from podfleet.control.snapshot import metric_column
from tests.control.conftest import active_cluster, advance


def test_a_fleet_deploys_in_one_pods_time_and_counts_its_pods(plane: ControlPlane) -> None:
    one = active_cluster(plane, "one")
    fleet = active_cluster(plane, "fleet", pods=65, pods_per_block=16)  # active within 30 s as one pod is
    assert step_durations_s(plane.resolve(fleet["id"])) == step_durations_s(plane.resolve(one["id"]))
    m = plane.describe_cluster(fleet["id"])["scheduler"]
    assert m["pod_count"] == 65 and m["pods"] == [] and m["pods_whole_free"] == 65, m
    assert "summary=true" in m["pods_in"]
    assert len(plane.describe_cluster(one["id"])["scheduler"]["pods"]) == 1


def test_a_page_of_the_snapshot_is_the_whole_snapshot_sliced(plane: ControlPlane) -> None:
    cl = active_cluster(plane, "fleet", pods=4, pods_per_block=4)
    job = plane.jobs.submit(cl["id"], {"model": "llama3-8b", "chips": 128, "steps": 100000}, actor="test")
    advance(plane, 5)
    plane.render(plane.resolve(cl["id"]))
    whole = json.loads(plane.hardware(cl["id"]))
    page = plane.hardware_page(cl["id"], ChipFilter(pod=2), 64, None)
    assert json.loads(json.dumps(page["chips"])) == whole["chips"][128:192]
    assert json.loads(json.dumps(page["links"])) == [lk for lk in whole["links"] if 128 <= lk["src"] < 192]
    mine = plane.hardware_page(cl["id"], ChipFilter(job=job["id"]), 4096, None)["chips"]
    assert [c["index"] for c in mine] == [c["index"] for c in whole["chips"] if c["job"] == job["id"]]
    assert len(mine) == 128
    summary = json.loads(plane.hardware_summary(cl["id"]))
    assert sum(p["busy"] for p in summary["pods"]) == 128 and summary["blocks"][0]["chips"] == 256


def test_metrics_keep_three_decimals_and_nan_is_null() -> None:
    from podfleet.control.snapshot import EMPTY, HardwareSnapshot

    col = metric_column(np.array([1.23456, math.nan], dtype=np.float32))
    snap = HardwareSnapshot({"name": "x"}, [[0], [1]], ["healthy", "failed"], np.zeros(2, bool), {}, {1: "job-a"},
                            {"t": col, "cores": metric_column(np.array([[1.0, 2.0], [math.inf, 0.5]]))},
                            None, (), EMPTY.link_src, EMPTY.link_by_src, (), {}, None)
    assert snap.chip(0)["metrics"] == {"t": 1.235, "cores": [1.0, 2.0]}
    assert snap.chip(1)["metrics"] == {"t": None, "cores": [None, 0.5]}
    assert snap.as_dict()["chips"] == [snap.chip(0), snap.chip(1)]
    assert snap.chip(1)["job"] == "job-a" and snap.chip(1)["mode"] == "unavailable"


def test_the_pod_summary_counts_each_unhealthy_state_and_lists_its_jobs(plane: ControlPlane) -> None:
    cl = active_cluster(plane, "fleet", pods=4, pods_per_block=2)
    job = plane.jobs.submit(cl["id"], {"model": "llama3-8b", "chips": 256, "steps": 100000}, actor="test")
    advance(plane, 5)
    plane.inject_fault(cl["id"], "chip-failure", chip=3 * 64 + 5)
    advance(plane, 1)
    plane.render(plane.resolve(cl["id"]))
    pods = json.loads(plane.hardware_summary(cl["id"]))["pods"]
    assert [p["jobs"] for p in pods] == [[job["id"]]] * 4  # the gang spans every pod
    failed = pods[3]["states"]
    assert sum(n for st, n in failed.items() if st in ("failed", "isolated")) == 1, failed
    assert pods[0]["states"] == pods[1]["states"] == pods[2]["states"] == {}
    assert all(p["failed"] == sum(p["states"].values()) for p in pods)  # the states add up to "failed"
