"""Restart: reload from the store and reconcile with a fresh twin; nothing is lost."""

from __future__ import annotations

import json

from podfleet.fabric.base import ChipState
from podfleet.store import StoreProtocol
from tests.control.conftest import active_cluster, advance, make_plane


def test_restart_resumes_running_jobs_from_checkpoint(store: StoreProtocol) -> None:
    p1 = make_plane(store)
    active_cluster(p1, spares=1)
    running = p1.jobs.submit("pod", {"model": "tiny", "chips": 32, "steps": 60_000,
                                     "checkpoint_interval": 1000}, actor="t")
    pending = p1.jobs.submit("pod", {"model": "debug", "chips": 48, "steps": 10}, actor="t")
    advance(p1, 120)
    ckpt = p1.jobs.describe(running["id"])["checkpoint_step"]
    assert ckpt >= 1000
    p1.inject_fault("pod", "chip-failure", chip=0 if 0 not in running["allocation"]["chips"] else 63, actor="t")
    advance(p1, 1)
    deploying = p1.create_cluster({"name": "late", "type": "trn2-node"}, actor="t")
    ckpt = store.latest_checkpoint(running["id"]).step
    # "Crash": drop p1 entirely; a new control plane starts on the same store.
    p2 = make_plane(store, seed=1)
    p2.load()
    assert set(p2.names) == {"pod", "late"}
    # The spares chosen at create are persisted: the same chips after the restart.
    assert p2.clusters[p2.names["pod"]].spares == p1.clusters[p1.names["pod"]].spares
    after = p2.jobs.describe(running["id"])
    assert after["state"] == "RUNNING"
    assert "RECOVERING" in after["timestamps"]
    assert after["progress"]["step"] == ckpt
    assert p2.jobs.describe(pending["id"])["state"] == "PENDING"
    # Chip health survives: the failed chip stays out of service.
    states = {h.chip: h.state for h in store.list_chip_health(p2.names["pod"])}
    assert "isolated" in states.values()
    hw = json.loads(p2.hardware("pod"))
    assert [c["index"] for c in hw["chips"] if c["state"] == "isolated"]
    # A deployment cut short runs again to the end.
    advance(p2, 30)
    assert p2.describe_cluster(deploying["id"])["state"] == "active"
    advance(p2, 3000)
    assert p2.jobs.describe(running["id"])["state"] == "SUCCEEDED"


def test_a_restart_keeps_degraded_chips(store: StoreProtocol) -> None:
    """A fresh twin heals everything: the store's chip health puts degraded chips back
    (as it does failed ones), so a fenced chip is not counted as healthy after a restart."""
    p1 = make_plane(store)
    active_cluster(p1)
    rt1 = p1.clusters[p1.names["pod"]]
    rt1.fabric.set_chip_state(20, ChipState.DEGRADED, "test: a fenced HBM stack")
    p1.inject_fault("pod", "chip-failure", chip=21, actor="t")
    advance(p1, 1)
    p2 = make_plane(store, seed=1)
    p2.load()
    chips = p2.clusters[p2.names["pod"]].chip_states()
    assert chips[20] == ChipState.DEGRADED and chips[21] == ChipState.ISOLATED
    assert sum(s != ChipState.HEALTHY for s in chips) == 2
