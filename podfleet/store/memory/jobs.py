"""Jobs and their checkpoints, in memory (``protocol.JobStore``)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from podfleet.store.memory.base import MemoryBase
from podfleet.store.records import CheckpointRecord, JobRecord


class MemoryJobs(MemoryBase):
    KEPT = {"_jobs": dict, "_checkpoints": dict}
    _jobs: dict[str, JobRecord]
    _checkpoints: dict[str, list[CheckpointRecord]]

    def save_job(self, rec: JobRecord) -> None:
        self._put("_jobs", rec.id, rec)

    def get_job(self, job_id: str) -> JobRecord | None:
        return self._get("_jobs", job_id)

    def list_jobs(self, *, cluster_id: str | None = None, states: Sequence[str] | None = None,
                  after: str | None = None, limit: int = 100) -> list[JobRecord]:
        return self._select("_jobs", lambda r: cluster_id in (None, r.cluster_id)
                            and (states is None or r.state in states) and (after is None or r.id > after),
                            lambda r: r.id, limit)

    def job_ids(self) -> list[str]:
        with self._lock:
            return sorted(self._jobs)

    def job_specs(self, job_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {j: copy.deepcopy(self._jobs[j].spec) for j in job_ids if j in self._jobs}

    # --- checkpoints ---------------------------------------------------------------------
    def add_checkpoint(self, rec: CheckpointRecord) -> None:
        with self._lock:
            self._touch("_checkpoints")
            self._checkpoints.setdefault(rec.job_id, []).append(copy.deepcopy(rec))

    def latest_checkpoint(self, job_id: str) -> CheckpointRecord | None:
        with self._lock:
            cps = self._checkpoints.get(job_id)
            return copy.deepcopy(max(cps, key=lambda c: c.step)) if cps else None

    def latest_checkpoint_steps(self, job_ids: Sequence[str]) -> dict[str, int]:
        with self._lock:
            return {j: max(c.step for c in self._checkpoints[j]) for j in job_ids if self._checkpoints.get(j)}

    def list_checkpoints(self, job_id: str) -> list[CheckpointRecord]:
        with self._lock:
            return sorted((copy.deepcopy(c) for c in self._checkpoints.get(job_id, [])),
                          key=lambda c: (c.step, c.created_at))
