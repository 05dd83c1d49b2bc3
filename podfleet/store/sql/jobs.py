"""Jobs and their checkpoints, in SQL (``protocol.JobStore``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, insert, select

from podfleet.store.common import check_limit
from podfleet.store.convert import row_of
from podfleet.store.models import CheckpointRow, JobRow, table_of
from podfleet.store.records import CheckpointRecord, JobRecord
from podfleet.store.sql.base import SqlBase


class SqlJobs(SqlBase):
    def save_job(self, rec: JobRecord) -> None:
        self._upsert(JobRow, [row_of(rec)], ["id"])

    def get_job(self, job_id: str) -> JobRecord | None:
        return self._get(JobRow, job_id, JobRecord)

    def list_jobs(
        self,
        *,
        cluster_id: str | None = None,
        states: Sequence[str] | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> list[JobRecord]:
        check_limit(limit)
        q = select(JobRow).order_by(JobRow.id).limit(limit)
        if cluster_id is not None:
            q = q.where(JobRow.cluster_id == cluster_id)
        if states is not None:
            q = q.where(JobRow.state.in_(list(states)))
        if after is not None:
            q = q.where(JobRow.id > after)
        return self._all(q, JobRecord)

    def job_ids(self) -> list[str]:
        """Every job's id (no other column): what a follower scans for jobs it has not seen."""
        with self._reading() as s:
            return [str(i) for i in s.execute(select(JobRow.id).order_by(JobRow.id)).scalars()]

    def job_specs(self, job_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The stored specs of ``job_ids`` (unknown ids left out), a few hundred per query."""
        out: dict[str, dict[str, Any]] = {}
        ids = list(job_ids)
        for lo in range(0, len(ids), 500):
            q = select(JobRow.id, JobRow.spec).where(JobRow.id.in_(ids[lo:lo + 500]))
            with self._reading() as s:
                out.update({str(i): dict(spec) for i, spec in s.execute(q)})
        return out

    # ---- checkpoints -----------------------------------------------------------------
    def add_checkpoint(self, rec: CheckpointRecord) -> None:
        with self._writing() as s:
            s.execute(insert(table_of(CheckpointRow)), [row_of(rec)])

    def latest_checkpoint(self, job_id: str) -> CheckpointRecord | None:
        q = (
            select(CheckpointRow)
            .where(CheckpointRow.job_id == job_id)
            .order_by(CheckpointRow.step.desc(), CheckpointRow.created_at.desc())
            .limit(1)
        )
        return self._first(q, CheckpointRecord)

    def latest_checkpoint_steps(self, job_ids: Sequence[str]) -> dict[str, int]:
        """Each job's newest checkpoint step (jobs without one left out), in one query: a
        reload asks this for a page of jobs at a time instead of once per job (800 round
        trips were two thirds of a new leader's reload)."""
        if not job_ids:
            return {}
        q = (select(CheckpointRow.job_id, func.max(CheckpointRow.step))
             .where(CheckpointRow.job_id.in_(list(job_ids))).group_by(CheckpointRow.job_id))
        with self._reading() as s:
            return {str(job): int(step) for job, step in s.execute(q)}

    def list_checkpoints(self, job_id: str) -> list[CheckpointRecord]:
        q = select(CheckpointRow).where(CheckpointRow.job_id == job_id)
        return self._all(q.order_by(CheckpointRow.step, CheckpointRow.created_at), CheckpointRecord)
