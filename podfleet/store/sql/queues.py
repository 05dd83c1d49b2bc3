"""Cluster queues, advance reservations and priority classes, in SQL
(``protocol.QueueStore``)."""

from __future__ import annotations

from typing import TypeVar

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError

from podfleet.errors import ConflictError, PodfleetError
from podfleet.store.convert import row_of
from podfleet.store.models import PriorityClassRow, QueueRow, ReservationRow
from podfleet.store.records import PriorityClassRecord, QueueRecord, ReservationRecord
from podfleet.store.sql.base import SqlBase

R = TypeVar("R", QueueRecord, ReservationRecord)


class SqlQueues(SqlBase):
    # Queues and reservations are the same kind of row: a name unique on its cluster and a
    # JSON spec; one body each for saving, listing and deleting them.
    def _save_named(self, model: type[QueueRow | ReservationRow], noun: str,
                    rec: QueueRecord | ReservationRecord) -> None:
        def conflict(_exc: IntegrityError) -> PodfleetError:
            return ConflictError(f"a {noun} named {rec.name!r} already exists on cluster {rec.cluster_id}",
                                 field="name")

        self._upsert(model, [row_of(rec)], ["id"], conflict)

    def _list_named(self, model: type[QueueRow | ReservationRow], cls: type[R], cluster_id: str | None) -> list[R]:
        q = select(model).order_by(model.cluster_id, model.name)
        if cluster_id is not None:
            q = q.where(model.cluster_id == cluster_id)
        return self._all(q, cls)

    def _delete_id(self, model: type[QueueRow | ReservationRow], row_id: str) -> bool:
        return self._delete(delete(model).where(model.id == row_id)) > 0

    def save_queue(self, rec: QueueRecord) -> None:
        self._save_named(QueueRow, "queue", rec)

    def save_reservation(self, rec: ReservationRecord) -> None:
        self._save_named(ReservationRow, "reservation", rec)

    def list_queues(self, cluster_id: str | None = None) -> list[QueueRecord]:
        return self._list_named(QueueRow, QueueRecord, cluster_id)

    def list_reservations(self, cluster_id: str | None = None) -> list[ReservationRecord]:
        return self._list_named(ReservationRow, ReservationRecord, cluster_id)

    def delete_queue(self, queue_id: str) -> bool:
        return self._delete_id(QueueRow, queue_id)

    def delete_reservation(self, reservation_id: str) -> bool:
        return self._delete_id(ReservationRow, reservation_id)

    # ---- priority classes (upsert by name) ---------------------------------------------
    def save_priority_class(self, rec: PriorityClassRecord) -> None:
        self._upsert(PriorityClassRow, [row_of(rec, value=int(rec.value))], ["name"])

    def list_priority_classes(self) -> list[PriorityClassRecord]:
        return self._all(select(PriorityClassRow).order_by(PriorityClassRow.name), PriorityClassRecord)

    def delete_priority_class(self, name: str) -> bool:
        return self._delete(delete(PriorityClassRow).where(PriorityClassRow.name == name)) > 0
