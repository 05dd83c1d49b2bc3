"""Archived health reports, in SQL (``protocol.ReportStore``)."""

from __future__ import annotations

from sqlalchemy import delete, select

from podfleet.store.common import check_limit
from podfleet.store.convert import row_of
from podfleet.store.models import HealthReportRow
from podfleet.store.records import ReportRecord
from podfleet.store.sql.base import SqlBase


class SqlReports(SqlBase):
    def save_report(self, rec: ReportRecord) -> None:
        self._upsert(HealthReportRow, [row_of(rec)], ["id"])

    def get_report(self, report_id: str) -> ReportRecord | None:
        return self._get(HealthReportRow, report_id, ReportRecord)

    def list_reports(self, cluster_id: str, *, limit: int = 1000) -> list[ReportRecord]:
        check_limit(limit)
        q = select(HealthReportRow).where(HealthReportRow.cluster_id == cluster_id).order_by(
            HealthReportRow.created_at, HealthReportRow.id).limit(limit)
        return self._all(q, ReportRecord)

    def prune_reports(self, *, before: float, cluster_id: str | None = None) -> int:
        q = delete(HealthReportRow).where(HealthReportRow.created_at < before)
        if cluster_id is not None:
            q = q.where(HealthReportRow.cluster_id == cluster_id)
        return self._delete(q)
