"""Clusters and their chips' health, in memory (``protocol.ClusterStore``)."""

from __future__ import annotations

import copy
from collections.abc import Sequence

from podfleet.store.memory.base import MemoryBase
from podfleet.store.records import ChipHealthRecord, ClusterRecord


class MemoryClusters(MemoryBase):
    KEPT = {"_clusters": dict, "_health": dict}
    _clusters: dict[str, ClusterRecord]
    _health: dict[tuple[str, int], ChipHealthRecord]

    def save_cluster(self, rec: ClusterRecord) -> None:
        self._put("_clusters", rec.id, rec)

    def get_cluster(self, cluster_id: str) -> ClusterRecord | None:
        return self._get("_clusters", cluster_id)

    def find_cluster_by_name(self, name: str) -> ClusterRecord | None:
        return self._find("_clusters", lambda r: r.name == name and r.state != "deleted")

    def list_clusters(self, *, after: str | None = None, limit: int = 100,
                      include_deleted: bool = False) -> list[ClusterRecord]:
        return self._select("_clusters", lambda r: (after is None or r.id > after)
                            and (include_deleted or r.state != "deleted"), lambda r: r.id, limit)

    def save_chip_health(self, records: Sequence[ChipHealthRecord]) -> None:
        with self._lock:
            self._touch("_health")
            for r in records:
                self._health[(r.cluster_id, r.chip)] = copy.deepcopy(r)

    def list_chip_health(self, cluster_id: str) -> list[ChipHealthRecord]:
        return self._select("_health", lambda r: r.cluster_id == cluster_id, lambda r: r.chip)
