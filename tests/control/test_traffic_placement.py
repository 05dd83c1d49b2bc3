"""The twin's link traffic feeds placement in the control plane (``LinkTraffic``):
``scheduling.sync`` hands the running rings' load per directed link to the scheduler
before each cycle, so a new job's block keeps off links another job's ring loads."""

from __future__ import annotations

from typing import Any

import numpy as np

from podfleet.control import ControlPlane, scheduling
from podfleet.fabric.base import LinkTraffic
from podfleet.hardware.topology import GridTopology
from podfleet.scheduler.traffic import ring_links
from tests.control.conftest import active_cluster, advance, make_plane

JOB = {"model": "debug", "steps": 10**6, "chips": 16}


def _run(plane: ControlPlane) -> tuple[str, list[int], Any]:
    view = active_cluster(plane)
    rt = plane.clusters[view["id"]]
    job = plane.jobs.submit("pod", dict(JOB), actor="t")
    assert job["state"] == "RUNNING"
    advance(plane, 5)
    return job["id"], job["allocation"]["chips"], rt


def test_the_scheduler_sees_the_twins_link_traffic(plane: ControlPlane) -> None:
    job_id, _chips, rt = _run(plane)
    assert isinstance(rt.fabric, LinkTraffic)
    load = rt.fabric.link_traffic()
    assert load.any() and load.shape == (2 * len(rt.topology.links),)
    scheduling.sync(rt)
    pod = rt.scheduler.cluster.pods[0]
    assert pod.link_traffic is not None and np.array_equal(pod.link_traffic, load)
    plane.jobs.stop(job_id, actor="t")
    advance(plane, 5)
    assert not rt.fabric.link_traffic().any()
    scheduling.sync(rt)
    assert not rt.scheduler.cluster.traffic_pods  # traffic that ended is forgotten


def test_new_job_keeps_off_a_detoured_ring() -> None:
    # Where a second job goes while the first runs on healthy links.
    ref = make_plane()
    _run(ref)
    quiet = ref.jobs.submit("pod", dict(JOB), actor="t")["allocation"]
    clean = quiet["chips"]

    plane = make_plane()
    _job, chips, rt = _run(plane)
    topo = rt.topology
    assert isinstance(topo, GridTopology)
    # A link between two of the first job's ranks goes down: its ring detours over links
    # outside its block, among them one the quiet-pod choice's ring would use.
    a, b = chips[3], chips[4]
    plane.inject_fault("pod", "link-down", link=f"{min(a, b)}-{max(a, b)}", actor="t")
    advance(plane, 5)
    load = rt.fabric.link_traffic()
    outside = [d for d in np.flatnonzero(load).tolist()
               if not {topo.links[d // 2].src, topo.links[d // 2].dst} <= set(chips)]
    assert outside, "the detour stays inside the first job's block"
    clean_links, _ = ring_links(topo, tuple(clean))
    assert load[clean_links].any(), "the quiet-pod choice does not cross the detour: nothing to test"

    job = plane.jobs.submit("pod", dict(JOB), actor="t")
    assert job["state"] == "RUNNING"
    got = job["allocation"]["chips"]
    assert sorted(job["allocation"]["shape"]) == sorted(quiet["shape"])  # an equal block
    got_links, _ = ring_links(topo, tuple(got))
    assert not load[got_links].any(), (clean, got)
    advance(plane, 5)
    cong = rt.fabric.congestion
    assert cong.slowdown(job["id"]) == 1.0  # its ring runs at full speed beside the detour
