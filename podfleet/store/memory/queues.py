"""Cluster queues, advance reservations and priority classes, in memory
(``protocol.QueueStore``)."""

from __future__ import annotations

from typing import Any

from podfleet.errors import ConflictError
from podfleet.store.memory.base import MemoryBase
from podfleet.store.records import PriorityClassRecord, QueueRecord, ReservationRecord


class MemoryQueues(MemoryBase):
    KEPT = {"_queues": dict, "_reservations": dict, "_priority_classes": dict}
    _queues: dict[str, QueueRecord]
    _reservations: dict[str, ReservationRecord]
    _priority_classes: dict[str, PriorityClassRecord]

    # Queues and reservations: a name unique on its cluster, listed by (cluster, name).
    def _save_named(self, name: str, noun: str, rec: QueueRecord | ReservationRecord) -> None:
        with self._lock:
            if any(o.cluster_id == rec.cluster_id and o.name == rec.name and o.id != rec.id
                   for o in getattr(self, name).values()):
                raise ConflictError(f"a {noun} named {rec.name!r} already exists on cluster {rec.cluster_id}",
                                    field="name")
            self._put(name, rec.id, rec)

    def _list_named(self, name: str, cluster_id: str | None) -> list[Any]:
        return self._select(name, lambda o: cluster_id in (None, o.cluster_id), lambda o: (o.cluster_id, o.name))

    def save_queue(self, rec: QueueRecord) -> None:
        self._save_named("_queues", "queue", rec)

    def save_reservation(self, rec: ReservationRecord) -> None:
        self._save_named("_reservations", "reservation", rec)

    def list_queues(self, cluster_id: str | None = None) -> list[QueueRecord]:
        return self._list_named("_queues", cluster_id)

    def list_reservations(self, cluster_id: str | None = None) -> list[ReservationRecord]:
        return self._list_named("_reservations", cluster_id)

    def delete_queue(self, queue_id: str) -> bool:
        return self._delete("_queues", queue_id)

    def delete_reservation(self, reservation_id: str) -> bool:
        return self._delete("_reservations", reservation_id)

    # --- priority classes (by name) ------------------------------------------------------
    def save_priority_class(self, rec: PriorityClassRecord) -> None:
        self._put("_priority_classes", rec.name, rec)

    def list_priority_classes(self) -> list[PriorityClassRecord]:
        return self._select("_priority_classes", order=lambda r: r.name)

    def delete_priority_class(self, name: str) -> bool:
        return self._delete("_priority_classes", name)
