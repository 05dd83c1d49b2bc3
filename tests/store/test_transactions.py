"""transaction(): all or nothing; failed calls inside it write nothing; threads."""

from __future__ import annotations

import threading

import pytest

from podfleet.errors import ConflictError
from podfleet.store import Store
from tests.store.factories import cluster, job


class Boom(Exception):
    pass


def test_exception_rolls_back_everything(store: Store) -> None:
    store.save_cluster(cluster(0))
    with pytest.raises(Boom), store.transaction():
        store.save_job(job(1))
        store.put_idempotent("SubmitTrainingJob", "ct-1", "job-001", "h")
        store.append_audit(time=1.0, actor="a", action="SubmitTrainingJob", target="job-001",
                           result="ok", detail={})
        assert store.get_job("job-001") is not None  # visible inside its own transaction
        raise Boom
    assert store.get_job("job-001") is None
    assert store.get_idempotent("SubmitTrainingJob", "ct-1") is None
    assert store.list_audit() == []
    # the rolled-back append consumed no seq: the next record is 1 and the chain is intact
    assert store.append_audit(time=2.0, actor="a", action="X", target="", result="ok",
                              detail={}).seq == 1
    assert store.verify_audit()[0]


def test_commit_applies_all_and_nesting_joins(store: Store) -> None:
    with store.transaction():
        store.save_cluster(cluster(0))
        with store.transaction():
            assert store.in_transaction
            store.save_job(job(1))
        store.append_audit(time=1.0, actor="a", action="X", target="", result="ok", detail={})
    assert not store.in_transaction
    assert store.get_job("job-001") is not None
    assert [a.seq for a in store.list_audit()] == [1]


def test_failed_call_inside_transaction_writes_nothing_but_keeps_the_rest(store: Store) -> None:
    with store.transaction():
        store.save_cluster(cluster(0))
        store.put_idempotent("SubmitTrainingJob", "ct-1", "job-001", "h")
        with pytest.raises(ConflictError):
            store.put_idempotent("SubmitTrainingJob", "ct-1", "job-002", "h")
        store.save_job(job(1))
    assert store.get_job("job-001") is not None
    assert store.get_idempotent("SubmitTrainingJob", "ct-1") == "job-001"


def test_readers_in_other_threads_see_only_committed_state(store: Store) -> None:
    store.save_cluster(cluster(0))
    seen: list[object] = []
    with store.transaction():
        store.save_job(job(1))
        t = threading.Thread(target=lambda: seen.append(store.get_job("job-001")))
        t.start()
        t.join()
    assert seen == [None]
    t = threading.Thread(target=lambda: seen.append(store.get_job("job-001")))
    t.start()
    t.join()
    assert seen[1] is not None


def test_concurrent_writers_from_threads(store: Store) -> None:
    store.save_cluster(cluster(0))
    errors: list[BaseException] = []

    def write(k: int) -> None:
        try:
            for i in range(10):
                with store.transaction():
                    store.save_job(job(k * 100 + i))
                    store.append_audit(time=float(i), actor=f"w{k}", action="X",
                                       target="", result="ok", detail={"i": i})
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(store.list_jobs(limit=1000)) == 40
    assert [a.seq for a in store.iter_audit()] == list(range(1, 41))
    assert store.verify_audit() == (True, None, "audit chain intact: 40 records")
