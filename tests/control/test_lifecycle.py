"""Cluster and job lifecycles on the twin, in virtual time."""

from __future__ import annotations

import json

import pytest

from podfleet.control import ControlPlane
from podfleet.errors import (
    ConflictError,
    InfeasibleError,
    InvalidInputError,
    NotFoundError,
    UnknownNameError,
)
from tests.control.conftest import active_cluster, advance


def test_cluster_deploys_in_steps(plane: ControlPlane) -> None:
    view = plane.create_cluster({"name": "pod", "spares": 2}, actor="t")
    assert view["state"] == "deploying" and view["id"].startswith("cl-")
    advance(plane, 1.0)
    mid = plane.describe_cluster("pod")["deployment"]
    assert mid["state"] == "running" and 0 < mid["percent"] < 100
    advance(plane, 30)
    done = plane.describe_cluster("pod")
    assert done["state"] == "active"
    assert [s["state"] for s in done["deployment"]["steps"]] == ["succeeded"] * 4
    assert [s["name"] for s in done["deployment"]["steps"]] == [
        "chip-initialisation", "interconnect-configuration", "storage-mounts", "self-test"]
    msgs = [ln["message"] for ln in plane.clusters[view["id"]].logs.since(0)]
    assert any("self-test done" in m for m in msgs)
    assert plane.store.get_cluster(view["id"]).state == "active"


def test_several_clusters_and_delete(plane: ControlPlane) -> None:
    a = active_cluster(plane, "a")
    active_cluster(plane, "b", type="trn2-node")
    views, nxt = plane.list_clusters(max_results=1)
    assert len(views) == 1 and nxt == a["id"]
    rest, nxt2 = plane.list_clusters(next_token=nxt)
    assert [v["name"] for v in rest] == ["b"] and nxt2 is None
    job = plane.jobs.submit("a", {"model": "debug", "chips": 8, "steps": 10**6}, actor="t")
    plane.delete_cluster("a", actor="t")
    assert plane.describe_cluster(a["id"])["state"] == "deleted"
    assert plane.jobs.describe(job["id"])["state"] == "STOPPED"
    with pytest.raises(NotFoundError):
        plane.hardware("a")
    # The name is free again.
    plane.create_cluster({"name": "a"}, actor="t")


def test_job_runs_checkpoints_and_succeeds(plane: ControlPlane) -> None:
    active_cluster(plane, spares=2)
    job = plane.jobs.submit("pod", {"model": "debug", "chips": 16, "steps": 3000,
                                    "checkpoint_interval": 1000}, actor="t")
    assert job["state"] == "RUNNING" and len(job["allocation"]["chips"]) == 16
    advance(plane, 5)
    mid = plane.jobs.describe(job["id"])
    assert mid["progress"]["step"] > 0 and mid["progress"]["loss"] is not None
    assert mid["progress"]["tokens_per_s"] > 0
    advance(plane, 600)
    done = plane.jobs.describe(job["id"])
    assert done["state"] == "SUCCEEDED" and done["progress"]["step"] == 3000
    assert {"PENDING", "PLACING", "RUNNING", "CHECKPOINTING", "SUCCEEDED"} <= set(done["timestamps"])
    assert plane.store.latest_checkpoint(job["id"]).step == 3000
    assert plane.clusters[job["cluster_id"]].owner == {}


def test_pending_job_placed_when_chips_free(plane: ControlPlane) -> None:
    active_cluster(plane, spares=4)
    big = [plane.jobs.submit("pod", {"model": "debug", "chips": 24, "steps": 10**6}, actor="t") for _ in range(2)]
    waiting = plane.jobs.submit("pod", {"model": "debug", "chips": 16, "steps": 10**6}, actor="t")
    assert [j["state"] for j in big] == ["RUNNING", "RUNNING"]
    assert waiting["state"] == "PENDING" and waiting["reason"].startswith("Unschedulable: no free ")
    assert waiting["allocation"] == {"chips": [], "shape": [], "reason": waiting["reason"]}
    spares = set(plane.clusters[waiting["cluster_id"]].spares)
    for j in big:
        assert not spares & set(j["allocation"]["chips"])  # never on spares
    plane.jobs.stop(big[0]["id"], actor="t")
    assert plane.jobs.describe(waiting["id"])["state"] == "RUNNING"
    assert plane.jobs.describe(big[0]["id"])["state"] == "STOPPED"
    with pytest.raises(ConflictError):
        plane.jobs.stop(big[0]["id"], actor="t")


def test_chip_failure_moves_rank_to_spare_and_resumes(plane: ControlPlane) -> None:
    active_cluster(plane, spares=2)
    job = plane.jobs.submit("pod", {"model": "tiny", "chips": 16, "steps": 20_000,
                                    "checkpoint_interval": 1000}, actor="t")
    advance(plane, 60)
    before = plane.jobs.describe(job["id"])
    ckpt = before["checkpoint_step"]
    assert ckpt > 0
    victim = before["allocation"]["chips"][5]
    plane.inject_fault("pod", "chip-failure", chip=victim, actor="t")
    advance(plane, 0.01)
    after = plane.jobs.describe(job["id"])
    assert after["state"] == "RUNNING"
    assert "RECOVERING" in after["timestamps"]
    assert victim not in after["allocation"]["chips"]
    assert after["allocation"]["chips"][5] in plane.clusters[job["cluster_id"]].spares
    hw = json.loads(plane.hardware("pod"))
    assert hw["chips"][victim]["state"] in ("failed", "isolated")
    advance(plane, 1200)
    assert plane.jobs.describe(job["id"])["state"] == "SUCCEEDED"


def test_recovery_waits_without_a_free_chip(plane: ControlPlane) -> None:
    active_cluster(plane, type="trn2-node")
    a = plane.jobs.submit("pod", {"model": "debug", "chips": 12, "steps": 10**6}, actor="t")
    b = plane.jobs.submit("pod", {"model": "debug", "chips": 4, "steps": 10**6}, actor="t")
    plane.inject_fault("pod", "chip-failure", chip=a["allocation"]["chips"][0], actor="t")
    advance(plane, 1)
    waiting = plane.jobs.describe(a["id"])
    assert waiting["state"] == "RECOVERING" and "waiting" in waiting["reason"]
    plane.jobs.stop(b["id"], actor="t")
    advance(plane, 1)
    assert plane.jobs.describe(a["id"])["state"] == "RUNNING"


@pytest.mark.parametrize("body,exc,field", [
    ({"name": "x", "spares": 5}, InvalidInputError, "spares"),
    ({"name": "x", "spares": -1}, InvalidInputError, "spares"),
    ({"name": "x", "type": "trn9"}, UnknownNameError, "type"),
    ({"name": "Bad Name"}, InvalidInputError, "name"),
    ({"name": "x", "chips": 63}, InvalidInputError, "chips"),
    ({"name": "x", "type": "custom"}, InvalidInputError, "dims"),
    ({"name": "x", "type": "custom", "chips": 164}, InfeasibleError, "chips"),  # a ring past an axis's 64
    ({"name": "x", "hbm_gib": 500}, InvalidInputError, "hbm_gib"),
    ({"name": "x", "colour": "red"}, UnknownNameError, "colour"),
])
def test_bad_cluster_input_creates_nothing(plane: ControlPlane, body: dict, exc: type, field: str) -> None:
    with pytest.raises(exc) as info:
        plane.create_cluster(body, actor="t")
    assert info.value.field == field
    if body.get("chips") == 164:  # the refusal says how to ask for that many chips
        assert "give dims, e.g. [4, 41]" in info.value.message, info.value.message
    assert plane.store.list_clusters(include_deleted=True) == []
    assert plane.clusters == {}
    last = list(plane.store.iter_audit())[-1]
    assert last.result.startswith("error:") and last.action == "CreateTrainiumCluster"


@pytest.mark.parametrize("body,exc,field", [
    ({"model": "debug", "chips": 63}, InfeasibleError, "chips"),
    ({"model": "gpt-9", "chips": 8}, UnknownNameError, "model"),
    ({"model": "debug", "chips": 8, "parallelism": {"tp": 2, "pp": 2, "dp": 3}}, InvalidInputError, "parallelism"),
    ({"model": "debug", "chips": 0}, InvalidInputError, "chips"),
    ({"model": "debug", "chips": 8, "priority": 101}, InvalidInputError, "priority"),
])
def test_bad_job_input_creates_nothing(plane: ControlPlane, body: dict, exc: type, field: str) -> None:
    active_cluster(plane, spares=2)
    with pytest.raises(exc) as info:
        plane.jobs.submit("pod", body, actor="t")
    assert info.value.field == field
    assert plane.store.list_jobs() == [] and plane.jobs.views == {}


def test_unknown_cluster_and_job(plane: ControlPlane) -> None:
    with pytest.raises(NotFoundError):
        plane.jobs.submit("nope", {"model": "debug", "chips": 1}, actor="t")
    with pytest.raises(NotFoundError):
        plane.jobs.describe("job-nope")
    with pytest.raises(NotFoundError):
        plane.delete_cluster("nope", actor="t")


def test_fault_validation(plane: ControlPlane) -> None:
    active_cluster(plane)
    with pytest.raises(UnknownNameError, match="valid: chip-failure"):
        plane.inject_fault("pod", "meteor", chip=1, actor="t")
    with pytest.raises(NotFoundError):
        plane.inject_fault("pod", "chip-failure", chip=64, actor="t")
    with pytest.raises(NotFoundError, match="no link between chips 0 and 2"):
        plane.inject_fault("pod", "link-down", link="0-2", actor="t")
    with pytest.raises(InvalidInputError):
        plane.inject_fault("pod", "link-down", chip=1, actor="t")
    out = plane.inject_fault("pod", "link-down", link="0-1", actor="t")
    assert out["link_index"] is not None
    advance(plane, 2)
    hw = json.loads(plane.hardware("pod"))
    assert hw["links"][out["link_index"]]["state"] == "down"


def test_idempotent_retries(plane: ControlPlane) -> None:
    a = plane.create_cluster({"name": "pod"}, actor="t", client_token="tok-1")
    b = plane.create_cluster({"name": "pod"}, actor="t", client_token="tok-1")
    assert a["id"] == b["id"] and len(plane.clusters) == 1
    with pytest.raises(ConflictError, match="different"):
        plane.create_cluster({"name": "pod2"}, actor="t", client_token="tok-1")
    advance(plane, 30)
    j1 = plane.jobs.submit("pod", {"model": "debug", "chips": 4}, actor="t", client_token="j")
    j2 = plane.jobs.submit("pod", {"model": "debug", "chips": 4}, actor="t", client_token="j")
    assert j1["id"] == j2["id"] and len(plane.jobs.views) == 1
    with pytest.raises(ConflictError):
        plane.jobs.submit("pod", {"model": "debug", "chips": 8}, actor="t", client_token="j")
    assert len(plane.store.list_jobs()) == 1


def test_unavailable_fabric_is_refused(plane: ControlPlane, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("podfleet.fabric.factory.available_fabrics", lambda: ["sim"])
    with pytest.raises(InfeasibleError, match="fabric 'ray' not available") as info:
        plane.create_cluster({"name": "x", "fabric": "ray"}, actor="t")
    assert info.value.field == "fabric" and info.value.extra["allowed"] == ["sim"]
    assert plane.store.list_clusters(include_deleted=True) == []


def test_local_fabric_cluster_deploys(plane: ControlPlane) -> None:
    view = plane.create_cluster({"name": "loc", "type": "custom", "chips": 2, "fabric": "local"}, actor="t")
    try:
        advance(plane, 30)
        out = plane.describe_cluster("loc")
        assert out["state"] == "active" and out["fabric"] == "local" and out["chips"] == 2
        assert len(json.loads(plane.hardware("loc"))["chips"]) == 2
    finally:
        plane.delete_cluster(view["id"], actor="t")
