"""Clusters and their chips' health, in SQL (``protocol.ClusterStore``)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from podfleet.errors import ConflictError, PodfleetError
from podfleet.store.common import check_limit
from podfleet.store.convert import cluster_status, cluster_status_json, record_of, row_of
from podfleet.store.models import ChipHealthRow, ClusterRow
from podfleet.store.records import ChipHealthRecord, ClusterRecord
from podfleet.store.sql.base import SqlBase, integrity_error


def _record(r: ClusterRow) -> ClusterRecord:
    return record_of(ClusterRecord, r, status=cluster_status(r.status))


class SqlClusters(SqlBase):
    def save_cluster(self, rec: ClusterRecord) -> None:
        def conflict(exc: IntegrityError) -> PodfleetError:
            if "name" in str(exc.orig):
                return ConflictError(f"a cluster named {rec.name!r} already exists", field="name")
            return integrity_error(exc)

        self._upsert(ClusterRow, [row_of(rec, status=cluster_status_json(rec.status))], ["id"], conflict)

    def get_cluster(self, cluster_id: str) -> ClusterRecord | None:
        return self._get(ClusterRow, cluster_id, _record)

    def find_cluster_by_name(self, name: str) -> ClusterRecord | None:
        return self._first(select(ClusterRow).where(ClusterRow.name == name, ClusterRow.state != "deleted"), _record)

    def list_clusters(
        self, *, after: str | None = None, limit: int = 100, include_deleted: bool = False
    ) -> list[ClusterRecord]:
        check_limit(limit)
        q = select(ClusterRow).order_by(ClusterRow.id).limit(limit)
        if after is not None:
            q = q.where(ClusterRow.id > after)
        if not include_deleted:
            q = q.where(ClusterRow.state != "deleted")
        return self._all(q, _record)

    # ---- chip health (one row per cluster chip) --------------------------------------
    def save_chip_health(self, records: Sequence[ChipHealthRecord]) -> None:
        self._upsert(ChipHealthRow, [row_of(r) for r in records], ["cluster_id", "chip"])

    def list_chip_health(self, cluster_id: str) -> list[ChipHealthRecord]:
        q = select(ChipHealthRow).where(ChipHealthRow.cluster_id == cluster_id).order_by(ChipHealthRow.chip)
        return self._all(q, ChipHealthRecord)
