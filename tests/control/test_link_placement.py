"""Link state feeds placement in the control plane: after a link goes down on the twin,
a new job is placed on an equal block that does not hold it (``scheduling.sync`` folds
the fabric's link states into the scheduler before each cycle)."""

from __future__ import annotations

from podfleet.control import ControlPlane
from tests.control.conftest import active_cluster, advance, make_plane

JOB = {"model": "debug", "steps": 10**6, "chips": 16, "parallelism": {"tp": 4, "pp": 1, "dp": 4}}


def _holds(chips: list[int], a: int, b: int) -> bool:
    return a in chips and b in chips


def test_new_job_avoids_a_down_link(plane: ControlPlane) -> None:
    # Where the job goes on a healthy pod, and a link inside that block.
    ref = make_plane()
    active_cluster(ref)
    clean = ref.jobs.submit("pod", dict(JOB), actor="t")
    assert clean["state"] == "RUNNING"
    chips = clean["allocation"]["chips"]
    topo = ref.clusters[next(iter(ref.clusters))].topology
    link = next(lk for lk in topo.links if _holds(chips, lk.src, lk.dst))
    name = f"{min(link.src, link.dst)}-{max(link.src, link.dst)}"

    view = active_cluster(plane)
    plane.inject_fault("pod", "link-down", link=name, actor="t")
    advance(plane, 5)
    rt = plane.clusters[view["id"]]
    assert str(rt.fabric.link_states()[link.index]) != "up"
    job = plane.jobs.submit("pod", dict(JOB), actor="t")
    assert job["state"] == "RUNNING"
    got = job["allocation"]["chips"]
    assert sorted(job["allocation"]["shape"]) == sorted(clean["allocation"]["shape"])  # an equal block
    assert not _holds(got, link.src, link.dst), (name, got)
    assert rt.scheduler.cluster.pods[0].bad_links.get(link.index) in ("down", "degraded")
