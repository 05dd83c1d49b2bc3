"""Job metrics history, in memory (``protocol.JobMetricStore``)."""

from __future__ import annotations

import copy
from collections.abc import Sequence

from podfleet.store.memory.base import MemoryBase
from podfleet.store.records import JobMetricRecord


class MemoryJobMetrics(MemoryBase):
    KEPT = {"_job_metrics": dict}
    _job_metrics: dict[tuple[str, float, float], JobMetricRecord]

    def save_job_metrics(self, records: Sequence[JobMetricRecord]) -> None:
        with self._lock:
            self._touch("_job_metrics")
            for r in records:
                self._job_metrics[(r.job_id, float(r.resolution_s), float(r.t_start))] = copy.deepcopy(r)

    def list_job_metrics(self, job_id: str, *, resolution_s: float, since: float = 0.0,
                         limit: int = 100_000) -> list[JobMetricRecord]:
        return self._select("_job_metrics", lambda r: r.job_id == job_id and float(r.resolution_s) == float(resolution_s)
                            and float(r.t_start) >= since, lambda r: r.t_start, limit)
