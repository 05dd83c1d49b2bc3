"""Job metrics history, in SQL (``protocol.JobMetricStore``)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select

from podfleet.store.convert import row_of
from podfleet.store.models import JobMetricRollupRow
from podfleet.store.records import JobMetricRecord
from podfleet.store.sql.base import SqlBase


class SqlJobMetrics(SqlBase):
    def save_job_metrics(self, records: Sequence[JobMetricRecord]) -> None:
        """Upsert job metric buckets (an open bucket re-sent replaces itself)."""
        rows = [row_of(r, resolution_s=float(r.resolution_s), t_start=float(r.t_start)) for r in records]
        self._upsert(JobMetricRollupRow, rows, ["job_id", "resolution_s", "t_start"])

    def list_job_metrics(self, job_id: str, *, resolution_s: float, since: float = 0.0,
                         limit: int = 100_000) -> list[JobMetricRecord]:
        q = select(JobMetricRollupRow).where(
            JobMetricRollupRow.job_id == job_id,
            JobMetricRollupRow.resolution_s == float(resolution_s),
            JobMetricRollupRow.t_start >= since,
        ).order_by(JobMetricRollupRow.t_start).limit(limit)
        return self._all(q, JobMetricRecord)
