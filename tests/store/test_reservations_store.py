"""Advance reservations in the store: SQLite and PostgreSQL (the ``store`` fixture) and memory."""

from __future__ import annotations

import pytest

from podfleet.errors import ConflictError
from podfleet.store import Store
from podfleet.store.memory import MemoryStore
from podfleet.store.records import ReservationRecord


def _spec(chips: int, queue: str | None = None) -> dict[str, object]:
    return {"chips": chips, "chip_ids": list(range(chips)), "start_at": 100.0, "end_at": 200.0, "queue": queue}


def _roundtrip(store: Store | MemoryStore) -> None:
    store.save_reservation(ReservationRecord("rsv-1", "cl-1", "train", _spec(16, "a"), 1.0))
    store.save_reservation(ReservationRecord("rsv-2", "cl-1", "eval", _spec(4), 2.0))
    store.save_reservation(ReservationRecord("rsv-3", "cl-2", "train", _spec(8), 3.0))
    got = store.list_reservations("cl-1")
    assert [r.name for r in got] == ["eval", "train"]
    assert got[1].spec == _spec(16, "a") and got[1].created_at == 1.0
    assert len(store.list_reservations()) == 3
    with pytest.raises(ConflictError, match="a reservation named 'eval' already exists on cluster cl-1"):
        store.save_reservation(ReservationRecord("rsv-9", "cl-1", "eval", _spec(1), 9.0))
    assert store.delete_reservation("rsv-2") is True
    assert store.delete_reservation("rsv-2") is False
    assert [r.id for r in store.list_reservations("cl-1")] == ["rsv-1"]


def test_reservations_roundtrip(store: Store) -> None:
    _roundtrip(store)


def test_reservations_roundtrip_in_memory() -> None:
    _roundtrip(MemoryStore())


def test_a_rolled_back_reservation_is_gone(store: Store) -> None:
    with pytest.raises(RuntimeError), store.transaction():
        store.save_reservation(ReservationRecord("rsv-1", "cl-1", "a", _spec(1), 1.0))
        raise RuntimeError("boom")
    assert store.list_reservations() == []
