"""Chip lifecycle (cordon, drain, uncordon, repair) and spare accounting, on the twin in
virtual time."""

from __future__ import annotations

import json

import pytest

from podfleet.compose import build
from podfleet.control import ControlPlane
from podfleet.control.chipmodes import ChipMode, ChipModes
from podfleet.engine.timeline import Timeline
from podfleet.errors import ConflictError, InvalidInputError, NotFoundError
from podfleet.store.memory import MemoryStore
from tests.control.conftest import active_cluster, advance


@pytest.fixture
def full() -> ControlPlane:
    """The plane with its recovery service (rank moves on the twin)."""
    return build(MemoryStore(), Timeline(seed=3)).plane


def _audited(plane: ControlPlane, action: str) -> list[str]:
    return [r.result for r in plane.store.iter_audit() if r.action == action]


def test_modes_persist_as_plain_dicts() -> None:
    m = ChipModes()
    assert m.mode(3) is ChipMode.SCHEDULABLE
    assert m.set(3, ChipMode.DRAINING) is ChipMode.SCHEDULABLE
    m.set(3, ChipMode.CORDONED)
    assert m.to_dict() == {"3": "cordoned"} and ChipModes(m.to_dict()).listed() == [3]
    m.set(3, ChipMode.SCHEDULABLE)
    assert len(m) == 0 and m.to_dict() == {}


def test_cordon_keeps_placement_off_until_uncordon(plane: ControlPlane) -> None:
    active_cluster(plane, "node", type="trn2-node")  # 16 chips, no spares
    out = plane.chip_command("node", 0, "cordon", actor="op")
    assert out["mode"] == "cordoned" and out["state"] == "healthy"
    job = plane.jobs.submit("node", {"model": "debug", "chips": 16, "steps": 10**6}, actor="t")
    advance(plane, 20)
    assert plane.jobs.describe(job["id"])["state"] == "PENDING"
    hw_chip = plane.describe_cluster("node")
    assert hw_chip["cordoned"] == [0]
    out = plane.chip_command("node", 0, "uncordon", actor="op")
    assert out["mode"] == "schedulable"
    advance(plane, 2)
    assert plane.jobs.describe(job["id"])["state"] == "RUNNING"
    assert _audited(plane, "CordonChip") == ["ok"] and _audited(plane, "UncordonChip") == ["ok"]
    # A cordon survives in the cluster record (a restart reloads it).
    assert plane.store.get_cluster(hw_chip["id"]).status.chip_modes == {}


def test_bad_chip_and_illegal_moves_are_refused(plane: ControlPlane) -> None:
    active_cluster(plane, "node", type="trn2-node")
    with pytest.raises(NotFoundError, match="chip 99 does not exist"):
        plane.chip_command("node", 99, "cordon", actor="op")
    with pytest.raises(InvalidInputError, match="cordon, drain, uncordon, repair"):
        plane.chip_command("node", 1, "reboot", actor="op")
    with pytest.raises(ConflictError, match="healthy: nothing to repair"):
        plane.chip_command("node", 1, "repair", actor="op")
    assert _audited(plane, "RepairChip") == ["error:conflict"]


def test_drain_moves_the_rank_then_cordons(full: ControlPlane) -> None:
    active_cluster(full, spares=2)
    job = full.jobs.submit("pod", {"model": "debug", "chips": 8, "steps": 10**7, "checkpoint_interval": 100},
                           actor="t")
    advance(full, 5)
    chip = full.jobs.describe(job["id"])["allocation"]["chips"][0]
    out = full.chip_command("pod", chip, "drain", actor="op")
    assert out["mode"] == "draining"
    advance(full, 120)
    view = full.jobs.describe(job["id"])
    assert view["state"] == "RUNNING", view["reason"]
    assert chip not in view["allocation"]["chips"] and len(view["allocation"]["chips"]) == 8
    cl = full.describe_cluster("pod")
    assert cl["cordoned"] == [chip] and cl["draining"] == []


def test_used_spare_stops_being_a_spare_and_is_restored(full: ControlPlane) -> None:
    active_cluster(full, spares=2)
    before = full.describe_cluster("pod")["spares"]
    job = full.jobs.submit("pod", {"model": "debug", "chips": 8, "steps": 10**7, "checkpoint_interval": 100},
                           actor="t")
    advance(full, 5)
    chip = full.jobs.describe(job["id"])["allocation"]["chips"][1]
    full.inject_fault("pod", "chip-failure", chip=chip, actor="t")
    advance(full, 120)
    view = full.jobs.describe(job["id"])
    assert view["state"] == "RUNNING", view["reason"]
    took = [c for c in view["allocation"]["chips"] if c in before]
    assert took, (before, view["allocation"])
    cl = full.describe_cluster("pod")
    assert not set(took) & set(cl["spares"]) and len(cl["spares"]) == 2 and cl["spare_shortfall"] == ""
    hw = full.clusters[cl["id"]].hardware
    assert all(not hw["chips"][c]["spare"] for c in took)


def test_shortfall_is_said_when_spares_are_not_restored(full: ControlPlane) -> None:
    active_cluster(full, spares=1, restore_spares=False)
    spare = full.describe_cluster("pod")["spares"][0]
    job = full.jobs.submit("pod", {"model": "debug", "chips": 8, "steps": 10**7, "checkpoint_interval": 100},
                           actor="t")
    advance(full, 5)
    chip = full.jobs.describe(job["id"])["allocation"]["chips"][0]
    full.inject_fault("pod", "chip-failure", chip=chip, actor="t")
    advance(full, 120)
    assert spare in full.jobs.describe(job["id"])["allocation"]["chips"]
    cl = full.describe_cluster("pod")
    assert cl["spares"] == [] and "0 of 1 spares" in cl["spare_shortfall"]


def test_repair_returns_an_isolated_chip(plane: ControlPlane) -> None:
    active_cluster(plane, "node", type="trn2-node")
    plane.inject_fault("node", "chip-failure", chip=5, actor="t")
    advance(plane, 30)
    assert plane.clusters[plane.names["node"]].chip_states()[5].value == "isolated"
    rt = plane.clusters[plane.names["node"]]
    plane.render(rt)
    # Isolated by the fabric, left schedulable by the operator: placement skips it, so
    # every view says so rather than "schedulable".
    assert json.loads(plane.hardware("node", 5))["mode"] == "unavailable"
    out = plane.chip_command("node", 5, "cordon", actor="op", reason="hbm retest")
    assert out["state"] == "isolated" and out["mode"] == "cordoned"  # the operator's mode shows as it is
    assert any(ln["message"] == "chip 5: cordon (schedulable -> cordoned): hbm retest" for ln in rt.logs.since())
    assert plane.store.list_audit(limit=10_000)[-1].detail.get("reason") == "hbm retest"
    out = plane.chip_command("node", 5, "uncordon", actor="op")
    assert out["mode"] == "unavailable"
    out = plane.chip_command("node", 5, "repair", actor="op")
    assert out["state"] == "healthy" and out["mode"] == "schedulable"
    job = plane.jobs.submit("node", {"model": "debug", "chips": 16, "steps": 10**6}, actor="t")
    advance(plane, 2)
    assert plane.jobs.describe(job["id"])["state"] == "RUNNING"


def test_recoveries_are_audited_as_the_system(full: ControlPlane) -> None:
    active_cluster(full, spares=2)
    job = full.jobs.submit("pod", {"model": "debug", "chips": 8, "steps": 10**7, "checkpoint_interval": 100},
                           actor="t")
    advance(full, 5)
    full.inject_fault("pod", "chip-failure", chip=full.jobs.describe(job["id"])["allocation"]["chips"][2], actor="t")
    advance(full, 120)
    recs = [r for r in full.store.iter_audit() if r.action == "Recovery"]
    assert recs[0].detail["state"] == "running" and recs[-1].detail["state"] == "done"
    assert {r.actor for r in recs} == {"system:recovery"} and recs[0].target == job["id"]
    assert full.store.verify_audit()[0]
