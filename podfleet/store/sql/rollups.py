"""Telemetry rollups, in SQL (``protocol.RollupStore``): a bucket's figures are one JSON
column."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, select

from podfleet.store.models import TelemetryRollupRow
from podfleet.store.records import RollupRecord
from podfleet.store.sql.base import SqlBase

BUCKET = ["cluster_id", "scope", "metric", "resolution_s", "t_start"]


def _row(r: RollupRecord) -> dict[str, Any]:
    return {"cluster_id": r.cluster_id, "scope": r.scope, "metric": r.metric,
            "resolution_s": float(r.resolution_s), "t_start": float(r.t_start),
            "data": {"avg": list(r.avg), "min": list(r.min), "max": list(r.max), "count": int(r.count)}}


def _record(r: TelemetryRollupRow) -> RollupRecord:
    return RollupRecord(r.cluster_id, r.scope, r.metric, r.resolution_s, r.t_start, list(r.data["avg"]),
                        list(r.data["min"]), list(r.data["max"]), int(r.data["count"]))


class SqlRollups(SqlBase):
    def save_rollups(self, records: Sequence[RollupRecord]) -> None:
        """Upsert rollup buckets (a bucket re-sent after a restart replaces itself)."""
        self._upsert(TelemetryRollupRow, [_row(r) for r in records], BUCKET)

    def list_rollups(self, cluster_id: str, *, resolution_s: float, since: float = 0.0,
                     scope: str | None = None, metric: str | None = None, limit: int = 100_000) -> list[RollupRecord]:
        q = select(TelemetryRollupRow).where(
            TelemetryRollupRow.cluster_id == cluster_id,
            TelemetryRollupRow.resolution_s == float(resolution_s),
            TelemetryRollupRow.t_start >= since,
        )
        if scope is not None:
            q = q.where(TelemetryRollupRow.scope == scope)
        if metric is not None:
            q = q.where(TelemetryRollupRow.metric == metric)
        q = q.order_by(TelemetryRollupRow.t_start, TelemetryRollupRow.id).limit(limit)
        return self._all(q, _record)

    def prune_rollups(self, *, resolution_s: float, before: float) -> int:
        """Delete buckets of this resolution older than ``before`` (retention); returns how many."""
        return self._delete(delete(TelemetryRollupRow).where(
            TelemetryRollupRow.resolution_s == float(resolution_s), TelemetryRollupRow.t_start < before))
