"""A link fault whose detour slows a running job shows the job degraded, naming the
link (``recovery.linkimpact.LinkImpact``); the repair clears it."""

from __future__ import annotations

from pathlib import Path

from podfleet.fabric.base import FaultInjection
from podfleet.rehearsal.chaos import CLUSTER, ChaosRun

SLOWER = 1.05  # the tolerance the product reports degraded past


def _rate(run: ChaosRun, jid: str) -> float:
    return float(run.plane.jobs.describe(jid)["progress"]["tokens_per_s"] or 0.0)


def test_a_slowing_link_fault_marks_the_job_degraded_until_repaired(tmp_path: Path) -> None:
    run = ChaosRun(2, faults=0, db_path=str(tmp_path / "c.db"), restarts=0)
    run.setup()
    plane, rt = run.plane, run.rt
    jid = run.resident[0]  # 32 chips, tp 8: a third of its step is communication
    chips = set(plane.table.get(jid).chips)
    before = _rate(run, jid)
    assert before > 0
    inside = [lk for lk in rt.topology.links if lk.src in chips and lk.dst in chips]
    slowed = None
    for lk in inside:  # the first link whose detour costs the job more than the tolerance
        name = f"{lk.src}-{lk.dst}"
        plane.inject_fault(CLUSTER, "link-down", link=name, actor="test")
        run.advance(plane.tl.now + 200)  # a couple of steps over the detour
        view = plane.jobs.describe(jid)
        if _rate(run, jid) * SLOWER < before:
            slowed = (lk, name, view)
            break
        assert "degraded" not in str(view["reason"]), view["reason"]  # no cost, nothing reported
        fab = rt.fabric
        assert isinstance(fab, FaultInjection)
        fab.repair_link(lk.index, "test")
        run.advance(plane.tl.now + 200)
        before = _rate(run, jid)
    assert slowed is not None, "no link inside the job's block slows it"
    lk, name, view = slowed
    reason = str(view["reason"])
    assert view["state"] == "RUNNING"
    assert reason.startswith("degraded: link") and name in reason and "step time +" in reason, reason
    fab = rt.fabric
    assert isinstance(fab, FaultInjection)
    fab.repair_link(lk.index, "reseated")
    run.advance(plane.tl.now + 200)
    view = plane.jobs.describe(jid)
    assert "degraded" not in str(view["reason"]), view["reason"]
    assert _rate(run, jid) * SLOWER >= before  # back on the direct path
