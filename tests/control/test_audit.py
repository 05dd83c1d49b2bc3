"""The audit chain: every mutation recorded, verified, tampering detected."""

from __future__ import annotations

from podfleet.control import ControlPlane
from podfleet.store.memory import MemoryStore
from tests.control.conftest import active_cluster


def test_mutations_are_audited_and_chain_verifies(plane: ControlPlane) -> None:
    active_cluster(plane)
    job = plane.jobs.submit("pod", {"model": "debug", "chips": 4}, actor="alice")
    plane.jobs.stop(job["id"], actor="alice")
    recs = list(plane.store.iter_audit())
    assert [r.action for r in recs] == ["CreateTrainiumCluster", "SubmitTrainingJob", "StopTrainingJob"]
    assert recs[1].actor == "alice" and recs[1].target == job["id"] and recs[1].result == "ok"
    assert plane.store.verify_audit() == (True, None, "audit chain intact: 3 records")


def test_tampered_record_is_detected(plane: ControlPlane) -> None:
    active_cluster(plane)
    plane.jobs.submit("pod", {"model": "debug", "chips": 4}, actor="mallory")
    store = plane.store
    assert isinstance(store, MemoryStore)
    store.tamper_audit(2, actor="someone-else")
    ok, bad, msg = store.verify_audit()
    assert not ok and bad == 2 and "record 2" in msg
