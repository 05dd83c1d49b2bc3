"""CRUD, upsert, pagination, idempotency keys and tokens, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from podfleet.errors import ConflictError, InvalidInputError, NotFoundError
from podfleet.security.tokens import generate_token, hash_token, new_token_id
from podfleet.store import Store
from podfleet.store.memory import MemoryStore
from podfleet.store.records import CheckpointRecord, ChipHealthRecord, ClusterStatus, TokenRecord
from tests.store.factories import cluster, job


def test_cluster_roundtrip_and_upsert(store: Store) -> None:
    rec = cluster(0)
    store.save_cluster(rec)
    assert store.get_cluster("cl-000") == rec
    rec.state = "deleting"
    rec.status = ClusterStatus(reason="héllo", deployment={"nested": {"a": [1, 2, {"b": None}]}},
                               spares=[3], original_spares=[3, 4], chip_modes={"5": "cordoned"},
                               fabric_connected=False)
    store.save_cluster(rec)
    assert store.get_cluster("cl-000") == rec
    assert len(store.list_clusters()) == 1
    assert store.get_cluster("cl-missing") is None


def test_cluster_pagination_by_id(store: Store) -> None:
    for i in (4, 0, 6, 2, 1, 5, 3):
        store.save_cluster(cluster(i))
    pages, after = [], None
    while page := store.list_clusters(after=after, limit=3):
        pages.append([c.id for c in page])
        after = page[-1].id
    assert pages == [
        ["cl-000", "cl-001", "cl-002"], ["cl-003", "cl-004", "cl-005"], ["cl-006"]
    ]
    with pytest.raises(InvalidInputError) as err:
        store.list_clusters(limit=0)
    assert err.value.field == "limit"


def test_live_cluster_names_are_unique_and_deleted_ones_free_the_name(store: Store) -> None:
    store.save_cluster(cluster(1, name="pod"))
    with pytest.raises(ConflictError) as err:
        store.save_cluster(cluster(2, name="pod"))
    assert err.value.field == "name"
    assert store.get_cluster("cl-002") is None  # nothing half-written
    store.save_cluster(cluster(1, name="pod", state="deleted"))
    assert store.find_cluster_by_name("pod") is None
    store.save_cluster(cluster(2, name="pod"))
    found = store.find_cluster_by_name("pod")
    assert found is not None and found.id == "cl-002"
    assert [c.id for c in store.list_clusters()] == ["cl-002"]
    assert [c.id for c in store.list_clusters(include_deleted=True)] == ["cl-001", "cl-002"]


def test_jobs_filter_and_paginate(store: Store) -> None:
    store.save_cluster(cluster(0))
    store.save_cluster(cluster(1))
    for i in range(6):
        store.save_job(job(i, "cl-000" if i < 4 else "cl-001", "RUNNING" if i % 2 else "PENDING"))
    assert [j.id for j in store.list_jobs(cluster_id="cl-001")] == ["job-004", "job-005"]
    assert [j.id for j in store.list_jobs(states=["RUNNING"])] == ["job-001", "job-003", "job-005"]
    assert [j.id for j in store.list_jobs(cluster_id="cl-000", states=["PENDING"], after="job-000")] == ["job-002"]
    assert [j.id for j in store.list_jobs(limit=2, after="job-001")] == ["job-002", "job-003"]
    assert store.list_jobs(states=[]) == []
    updated = job(3, state="SUCCEEDED")
    updated.status = {"step": 100, "loss": 0.1, "tokens_per_s": 12345.5}
    store.save_job(updated)
    assert store.get_job("job-003") == updated


def test_job_for_unknown_cluster_is_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        store.save_job(job(1, cluster_id="cl-nope"))
    assert store.get_job("job-001") is None


def test_non_finite_floats_become_null_on_every_backend(store: Store) -> None:
    store.save_cluster(cluster(0))
    rec = job(0)
    rec.status = {"loss": float("nan"), "grad": [float("inf"), 1.5]}
    store.save_job(rec)
    got = store.get_job("job-000")
    assert got is not None and got.status == {"loss": None, "grad": [None, 1.5]}


def test_chip_health_upsert(store: Store) -> None:
    store.save_cluster(cluster(0))
    store.save_chip_health(
        [ChipHealthRecord("cl-000", c, "healthy", c >= 62, {"temp_c": 40 + c}) for c in range(64)]
    )
    store.save_chip_health([ChipHealthRecord("cl-000", 7, "failed", False, {"reason": "ecc"})])
    chips = store.list_chip_health("cl-000")
    assert [c.chip for c in chips] == list(range(64))
    assert chips[7] == ChipHealthRecord("cl-000", 7, "failed", False, {"reason": "ecc"})
    assert chips[63].spare and not chips[0].spare
    assert store.list_chip_health("cl-other") == []
    store.save_chip_health([])


def test_checkpoints_latest_by_step(store: Store) -> None:
    store.save_cluster(cluster(0))
    store.save_job(job(0))
    assert store.latest_checkpoint("job-000") is None
    for step in (100, 300, 200):
        store.add_checkpoint(
            CheckpointRecord(f"ckpt-{step}", "job-000", step, f"/ckpt/{step}", 1000.0 + step)
        )
    latest = store.latest_checkpoint("job-000")
    assert latest is not None and latest.step == 300 and latest.path == "/ckpt/300"
    assert [c.step for c in store.list_checkpoints("job-000")] == [100, 200, 300]
    with pytest.raises(ConflictError):
        store.add_checkpoint(CheckpointRecord("ckpt-100", "job-000", 400, "/x", 1.0))
    with pytest.raises(NotFoundError):
        store.add_checkpoint(CheckpointRecord("ckpt-x", "job-nope", 1, "/x", 1.0))


def test_latest_checkpoint_steps_of_many_jobs_in_one_call(store: Store) -> None:
    # What a reload reads per page of jobs: each job's newest step, jobs without one left out.
    store.save_cluster(cluster(0))
    for i in range(3):
        store.save_job(job(i))
    for jid, step in (("job-000", 10), ("job-000", 30), ("job-000", 20), ("job-002", 5)):
        store.add_checkpoint(CheckpointRecord(f"ckpt-{jid}-{step}", jid, step, f"/ckpt/{step}", 1000.0 + step))
    steps = store.latest_checkpoint_steps(["job-000", "job-001", "job-002", "job-nope"])
    assert steps == {"job-000": 30, "job-002": 5}
    assert store.latest_checkpoint_steps([]) == {}
    memory = MemoryStore()
    memory.save_cluster(cluster(0))
    memory.save_job(job(0))
    memory.add_checkpoint(CheckpointRecord("c1", "job-000", 7, "/c", 1.0))
    memory.add_checkpoint(CheckpointRecord("c2", "job-000", 3, "/c", 2.0))
    assert memory.latest_checkpoint_steps(["job-000", "job-001"]) == {"job-000": 7}


def test_job_ids_and_specs_for_a_followers_warm_up(store: Store) -> None:
    store.save_cluster(cluster(0))
    for i in (2, 0, 1):
        store.save_job(job(i))
    assert store.job_ids() == ["job-000", "job-001", "job-002"]
    specs = store.job_specs(["job-002", "job-000", "job-nope"])
    assert specs == {"job-002": job(2).spec, "job-000": job(0).spec}
    assert store.job_specs([]) == {}


def test_idempotency_keys_are_unique_per_operation(store: Store) -> None:
    assert store.get_idempotent("SubmitTrainingJob", "tok-1") is None
    store.put_idempotent("SubmitTrainingJob", "tok-1", "job-001", "h1")
    assert store.get_idempotent("SubmitTrainingJob", "tok-1") == "job-001"
    assert store.idempotent_request_hash("SubmitTrainingJob", "tok-1") == "h1"
    with pytest.raises(ConflictError) as err:
        store.put_idempotent("SubmitTrainingJob", "tok-1", "job-002", "h2")
    assert err.value.field == "client_token"
    assert store.get_idempotent("SubmitTrainingJob", "tok-1") == "job-001"
    store.put_idempotent("CreateTrainiumCluster", "tok-1", "cl-001", "h3")  # other operation
    assert store.get_idempotent("CreateTrainiumCluster", "tok-1") == "cl-001"


def test_tokens_by_hash(store: Store) -> None:
    assert store.count_tokens() == 0
    secret = generate_token()
    rec = TokenRecord(new_token_id(), "admin", "admin", hash_token(secret), 10.0)
    store.add_token(rec)
    assert store.find_token_by_hash(hash_token(secret)) == rec
    assert store.find_token_by_hash(hash_token(secret + "x")) is None
    assert store.find_token_by_hash(secret) is None  # the plain token is never a key
    with pytest.raises(ConflictError) as err:
        store.add_token(TokenRecord(new_token_id(), "dup", "viewer", rec.token_hash, 11.0))
    assert err.value.field == "token"
    other = TokenRecord(new_token_id(), "ci", "viewer", hash_token(generate_token()), 12.0)
    store.add_token(other)
    assert [t.id for t in store.list_tokens()] == [rec.id, other.id]
    assert store.count_tokens() == 2
    store.revoke_token(other.id)
    got = store.get_token(other.id)
    assert got is not None and got.revoked
    with pytest.raises(NotFoundError):
        store.revoke_token("tok-missing")


def test_telemetry_rollups_upsert_query_and_prune(store) -> None:
    from podfleet.store.records import RollupRecord

    def row(t: float, metric: str = "temperature_c", res: float = 60.0, v: float = 1.0) -> RollupRecord:
        return RollupRecord("cl-r", "chip", metric, res, t, [v, v], [v, v], [v, v], 30)

    store.save_rollups([row(0.0), row(60.0), row(120.0), row(0.0, "power_w"), row(0.0, res=3600.0)])
    store.save_rollups([row(60.0, v=2.0)])  # re-sent bucket replaces itself
    got = store.list_rollups("cl-r", resolution_s=60.0, metric="temperature_c", since=30.0)
    assert [r.t_start for r in got] == [60.0, 120.0] and got[0].avg == [2.0, 2.0] and got[0].count == 30
    assert len(store.list_rollups("cl-r", resolution_s=60.0)) == 4
    assert store.prune_rollups(resolution_s=60.0, before=100.0) == 3
    assert [r.t_start for r in store.list_rollups("cl-r", resolution_s=60.0)] == [120.0]
    assert len(store.list_rollups("cl-r", resolution_s=3600.0)) == 1


def test_a_cluster_status_stored_as_a_dict_loads_typed() -> None:
    # Rows written before the status was typed: the same JSON shape, unknown keys left out.
    from podfleet.store.convert import cluster_status, cluster_status_json

    old = {"deployment": None, "spares": [60, 61], "reason": "ok", "fabric_connected": False, "gone": 1}
    st = cluster_status(old)
    assert st == ClusterStatus(reason="ok", spares=[60, 61], fabric_connected=False)
    assert cluster_status_json(st) == {"reason": "ok", "spares": [60, 61], "fabric_connected": False}
    assert cluster_status(None) == ClusterStatus()
