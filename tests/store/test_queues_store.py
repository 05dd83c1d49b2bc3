"""Cluster queues in the store: SQLite and PostgreSQL (the ``store`` fixture) and memory."""

from __future__ import annotations

import pytest

from podfleet.errors import ConflictError
from podfleet.store import Store
from podfleet.store.memory import MemoryStore
from podfleet.store.records import QueueRecord


def _roundtrip(store: Store | MemoryStore) -> None:
    a = QueueRecord("q-1", "cl-1", "team-a", {"name": "team-a", "nominal": 32, "cohort": "c"}, 1.0, 1.0)
    store.save_queue(a)
    store.save_queue(QueueRecord("q-2", "cl-1", "team-b", {"name": "team-b", "nominal": 8}, 2.0, 2.0))
    store.save_queue(QueueRecord("q-3", "cl-2", "team-a", {"name": "team-a", "nominal": 4}, 3.0, 3.0))
    assert [q.name for q in store.list_queues("cl-1")] == ["team-a", "team-b"]
    assert len(store.list_queues()) == 3
    a.spec = {**a.spec, "nominal": 16}
    a.updated_at = 5.0
    store.save_queue(a)  # upsert by id
    got = store.list_queues("cl-1")[0]
    assert got.spec["nominal"] == 16 and got.updated_at == 5.0
    with pytest.raises(ConflictError, match="a queue named 'team-b' already exists on cluster cl-1"):
        store.save_queue(QueueRecord("q-9", "cl-1", "team-b", {}, 9.0, 9.0))
    assert store.delete_queue("q-2") is True
    assert store.delete_queue("q-2") is False
    assert [q.id for q in store.list_queues("cl-1")] == ["q-1"]


def test_queues_roundtrip(store: Store) -> None:
    _roundtrip(store)


def test_queues_roundtrip_in_memory() -> None:
    _roundtrip(MemoryStore())


def test_a_rolled_back_queue_is_gone(store: Store) -> None:
    with pytest.raises(RuntimeError), store.transaction():
        store.save_queue(QueueRecord("q-1", "cl-1", "a", {}, 1.0, 1.0))
        raise RuntimeError("boom")
    assert store.list_queues() == []


def test_priority_classes_roundtrip(store: Store) -> None:
    from podfleet.store.records import PriorityClassRecord

    store.save_priority_class(PriorityClassRecord("urgent", 90, "lower", 1.0))
    store.save_priority_class(PriorityClassRecord("batch", 10, "never", 2.0))
    store.save_priority_class(PriorityClassRecord("batch", 20, "never", 3.0))  # upsert by name
    assert [(r.name, r.value) for r in store.list_priority_classes()] == [("batch", 20), ("urgent", 90)]
    assert store.delete_priority_class("batch") and not store.delete_priority_class("batch")
    assert [r.name for r in store.list_priority_classes()] == ["urgent"]
