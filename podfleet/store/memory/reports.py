"""Archived health reports, in memory (``protocol.ReportStore``)."""

from __future__ import annotations

from podfleet.store.common import check_limit
from podfleet.store.memory.base import MemoryBase
from podfleet.store.records import ReportRecord


class MemoryReports(MemoryBase):
    KEPT = {"_reports": dict}
    _reports: dict[str, ReportRecord]

    def save_report(self, rec: ReportRecord) -> None:
        self._put("_reports", rec.id, rec)

    def get_report(self, report_id: str) -> ReportRecord | None:
        return self._get("_reports", report_id)

    def list_reports(self, cluster_id: str, *, limit: int = 1000) -> list[ReportRecord]:
        check_limit(limit)
        return self._select("_reports", lambda r: r.cluster_id == cluster_id, lambda r: (r.created_at, r.id), limit)

    def prune_reports(self, *, before: float, cluster_id: str | None = None) -> int:
        return self._prune("_reports", lambda _k, r: r.created_at < before and cluster_id in (None, r.cluster_id))
