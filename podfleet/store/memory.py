"""An in-memory ``StoreProtocol`` for fast unit tests (like httpx's ``MockTransport``).

Same semantics as the database store: upserts by id, live-name lookup, idempotency keys,
hashed tokens and a hash-chained audit trail (``podfleet.security.audit``).
``transaction()`` rolls every change back if the block raises. Not durable.
"""

from __future__ import annotations

import copy
import dataclasses
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from podfleet.errors import ConflictError, NotFoundError
from podfleet.security.audit import GENESIS_HASH, audit_hash, verify_chain
from podfleet.store.audit_log import AuditKeyring
from podfleet.store.convert import check_limit
from podfleet.store.records import (
    AuditRecord,
    CheckpointRecord,
    ChipHealthRecord,
    ClusterRecord,
    JobMetricRecord,
    JobRecord,
    PriorityClassRecord,
    QueueRecord,
    ReportRecord,
    ReservationRecord,
    RollupRecord,
    TokenRecord,
    UserRecord,
)


class MemoryStore(AuditKeyring):
    def __init__(self) -> None:
        self.url = "memory://"
        self._lock = threading.RLock()
        self._clusters: dict[str, ClusterRecord] = {}
        self._jobs: dict[str, JobRecord] = {}
        self._health: dict[tuple[str, int], ChipHealthRecord] = {}
        self._checkpoints: dict[str, list[CheckpointRecord]] = {}
        self._idem: dict[tuple[str, str], tuple[str, str]] = {}
        self._tokens: dict[str, TokenRecord] = {}
        self._audit: list[AuditRecord] = []
        self._rollups: dict[tuple[str, str, str, float, float], RollupRecord] = {}
        self._job_metrics: dict[tuple[str, float, float], JobMetricRecord] = {}
        self._users: dict[str, UserRecord] = {}
        self._reports: dict[str, ReportRecord] = {}
        self._queues: dict[str, QueueRecord] = {}
        self._priority_classes: dict[str, PriorityClassRecord] = {}
        self._reservations: dict[str, ReservationRecord] = {}
        self._depth = 0
        self._frames: list[dict[str, Any]] = []

    _STATE = ("_clusters", "_jobs", "_health", "_checkpoints", "_idem", "_tokens", "_audit", "_rollups", "_job_metrics",
              "_users", "_reports", "_queues",
              "_priority_classes", "_reservations")

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self._lock:
            # Nested use is a savepoint, as in the SQL store: a failing inner block rolls
            # back its own writes only. A container is copied only when the block first
            # writes to it (``_touch``), so a transaction that writes little costs little
            # however large the store has grown (a rehearsal keeps thousands of records).
            frame: dict[str, Any] = {}
            self._frames.append(frame)
            self._depth += 1
            try:
                yield
            except BaseException:
                for k, v in frame.items():
                    if k == "_audit":
                        del self._audit[v:]  # append-only: its length is its snapshot
                    else:
                        setattr(self, k, v)
                raise
            finally:
                self._depth -= 1
                self._frames.pop()

    def _touch(self, name: str) -> None:
        """Before the first write to container ``name`` in each open transaction: keep what
        a rollback restores."""
        for frame in self._frames:
            if name not in frame:
                frame[name] = len(self._audit) if name == "_audit" else _snapshot(getattr(self, name))

    # The records kept by key: one copy in, one copy out, so a caller never holds the
    # store's own object.
    def _put(self, name: str, key: str, rec: object) -> None:
        with self._lock:
            self._touch(name)
            getattr(self, name)[key] = copy.deepcopy(rec)

    def _get(self, name: str, key: str) -> Any:
        with self._lock:
            rec = getattr(self, name).get(key)
            return copy.deepcopy(rec) if rec is not None else None

    def _delete(self, name: str, key: str) -> bool:
        with self._lock:
            if key not in getattr(self, name):
                return False
            self._touch(name)
            del getattr(self, name)[key]
            return True

    def ping(self) -> bool:
        return True  # in this process: there is nothing to be unreachable

    def close(self) -> None:
        pass

    # --- clusters ----------------------------------------------------------------
    def save_cluster(self, rec: ClusterRecord) -> None:
        self._put("_clusters", rec.id, rec)

    def get_cluster(self, cluster_id: str) -> ClusterRecord | None:
        return self._get("_clusters", cluster_id)

    def find_cluster_by_name(self, name: str) -> ClusterRecord | None:
        with self._lock:
            for rec in self._clusters.values():
                if rec.name == name and rec.state != "deleted":
                    return copy.deepcopy(rec)
            return None

    def list_clusters(self, *, after: str | None = None, limit: int = 100, include_deleted: bool = False) -> list[ClusterRecord]:
        with self._lock:
            recs = sorted(self._clusters.values(), key=lambda r: r.id)
            recs = [r for r in recs if (after is None or r.id > after) and (include_deleted or r.state != "deleted")]
            return [copy.deepcopy(r) for r in recs[:limit]]

    # --- jobs ------------------------------------------------------------------------
    def save_job(self, rec: JobRecord) -> None:
        self._put("_jobs", rec.id, rec)

    def get_job(self, job_id: str) -> JobRecord | None:
        return self._get("_jobs", job_id)

    def list_jobs(self, *, cluster_id: str | None = None, states: Sequence[str] | None = None, after: str | None = None, limit: int = 100) -> list[JobRecord]:
        with self._lock:
            recs = sorted(self._jobs.values(), key=lambda r: r.id)
            recs = [
                r for r in recs
                if (cluster_id is None or r.cluster_id == cluster_id)
                and (states is None or r.state in states)
                and (after is None or r.id > after)
            ]
            return [copy.deepcopy(r) for r in recs[:limit]]

    # --- chip health -------------------------------------------------------------------
    def save_chip_health(self, records: Sequence[ChipHealthRecord]) -> None:
        with self._lock:
            self._touch("_health")
            for r in records:
                self._health[(r.cluster_id, r.chip)] = copy.deepcopy(r)

    def list_chip_health(self, cluster_id: str) -> list[ChipHealthRecord]:
        with self._lock:
            return sorted(
                (copy.deepcopy(r) for (c, _), r in self._health.items() if c == cluster_id),
                key=lambda r: r.chip,
            )

    # --- telemetry rollups ----------------------------------------------------------------
    def save_rollups(self, records: Sequence[RollupRecord]) -> None:
        with self._lock:
            self._touch("_rollups")
            for r in records:
                self._rollups[(r.cluster_id, r.scope, r.metric, float(r.resolution_s), float(r.t_start))] = _rollup_kept(r)

    def list_rollups(self, cluster_id: str, *, resolution_s: float, since: float = 0.0, scope: str | None = None,
                     metric: str | None = None, limit: int = 100_000) -> list[RollupRecord]:
        with self._lock:
            out = [_rollup_copy(r) for (c, sc, m, res, t), r in self._rollups.items()
                   if c == cluster_id and res == float(resolution_s) and t >= since
                   and scope in (None, sc) and metric in (None, m)]
        return sorted(out, key=lambda r: r.t_start)[:limit]

    def prune_rollups(self, *, resolution_s: float, before: float) -> int:
        with self._lock:
            old = [k for k in self._rollups if k[3] == float(resolution_s) and k[4] < before]
            if old:
                self._touch("_rollups")
            for k in old:
                del self._rollups[k]
            return len(old)

    # --- job metrics history --------------------------------------------------------------
    def save_job_metrics(self, records: Sequence[JobMetricRecord]) -> None:
        with self._lock:
            self._touch("_job_metrics")
            for r in records:
                self._job_metrics[(r.job_id, float(r.resolution_s), float(r.t_start))] = copy.deepcopy(r)

    def list_job_metrics(self, job_id: str, *, resolution_s: float, since: float = 0.0,
                         limit: int = 100_000) -> list[JobMetricRecord]:
        with self._lock:
            out = [copy.deepcopy(r) for (j, res, t), r in self._job_metrics.items()
                   if j == job_id and res == float(resolution_s) and t >= since]
        return sorted(out, key=lambda r: r.t_start)[:limit]

    # --- health reports --------------------------------------------------------------------
    def save_report(self, rec: ReportRecord) -> None:
        self._put("_reports", rec.id, rec)

    def get_report(self, report_id: str) -> ReportRecord | None:
        return self._get("_reports", report_id)

    def list_reports(self, cluster_id: str, *, limit: int = 1000) -> list[ReportRecord]:
        check_limit(limit)
        with self._lock:
            out = [copy.deepcopy(r) for r in self._reports.values() if r.cluster_id == cluster_id]
        return sorted(out, key=lambda r: (r.created_at, r.id))[:limit]

    def prune_reports(self, *, before: float, cluster_id: str | None = None) -> int:
        with self._lock:
            old = [k for k, r in self._reports.items()
                   if r.created_at < before and cluster_id in (None, r.cluster_id)]
            if old:
                self._touch("_reports")
            for k in old:
                del self._reports[k]
            return len(old)

    # --- queues ---------------------------------------------------------------------------
    # Queues and reservations: a name unique on its cluster, listed by (cluster, name).
    def _save_named(self, name: str, noun: str, rec: QueueRecord | ReservationRecord) -> None:
        with self._lock:
            if any(o.cluster_id == rec.cluster_id and o.name == rec.name and o.id != rec.id
                   for o in getattr(self, name).values()):
                raise ConflictError(f"a {noun} named {rec.name!r} already exists on cluster {rec.cluster_id}",
                                    field="name")
            self._put(name, rec.id, rec)

    def _list_named(self, name: str, cluster_id: str | None) -> list[Any]:
        with self._lock:
            out = [copy.deepcopy(o) for o in getattr(self, name).values() if cluster_id in (None, o.cluster_id)]
        return sorted(out, key=lambda o: (o.cluster_id, o.name))

    def save_queue(self, rec: QueueRecord) -> None:
        self._save_named("_queues", "queue", rec)

    def list_queues(self, cluster_id: str | None = None) -> list[QueueRecord]:
        return self._list_named("_queues", cluster_id)

    def delete_queue(self, queue_id: str) -> bool:
        return self._delete("_queues", queue_id)

    # --- advance reservations ---------------------------------------------------------------
    def save_reservation(self, rec: ReservationRecord) -> None:
        self._save_named("_reservations", "reservation", rec)

    def list_reservations(self, cluster_id: str | None = None) -> list[ReservationRecord]:
        return self._list_named("_reservations", cluster_id)

    def delete_reservation(self, reservation_id: str) -> bool:
        return self._delete("_reservations", reservation_id)

    def save_priority_class(self, rec: PriorityClassRecord) -> None:
        self._put("_priority_classes", rec.name, rec)

    def list_priority_classes(self) -> list[PriorityClassRecord]:
        with self._lock:
            return [copy.deepcopy(r) for _, r in sorted(self._priority_classes.items())]

    def delete_priority_class(self, name: str) -> bool:
        return self._delete("_priority_classes", name)

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

    # --- idempotency ---------------------------------------------------------------------
    def get_idempotent(self, operation: str, client_token: str) -> str | None:
        with self._lock:
            hit = self._idem.get((operation, client_token))
            return hit[0] if hit else None

    def put_idempotent(self, operation: str, client_token: str, resource_id: str, request_hash: str) -> None:
        with self._lock:
            self._touch("_idem")
            self._idem[(operation, client_token)] = (resource_id, request_hash)

    def idempotent_request_hash(self, operation: str, client_token: str) -> str | None:
        with self._lock:
            hit = self._idem.get((operation, client_token))
            return hit[1] if hit else None

    # --- tokens --------------------------------------------------------------------------
    def add_token(self, rec: TokenRecord) -> None:
        self._put("_tokens", rec.id, rec)

    def find_token_by_hash(self, token_hash: str) -> TokenRecord | None:
        with self._lock:
            for t in self._tokens.values():
                if t.token_hash == token_hash:
                    return copy.deepcopy(t)
            return None

    def list_tokens(self) -> list[TokenRecord]:
        with self._lock:
            return [copy.deepcopy(t) for t in self._tokens.values()]

    def count_tokens(self) -> int:
        with self._lock:
            return len(self._tokens)

    def get_token(self, token_id: str) -> TokenRecord | None:
        return self._get("_tokens", token_id)

    def revoke_token(self, token_id: str) -> None:
        with self._lock:
            t = self._tokens.get(token_id)
            if t is None:
                raise NotFoundError(f"token {token_id!r} does not exist", field="token_id")
            self._touch("_tokens")
            self._tokens[token_id] = dataclasses.replace(t, revoked=True)

    # --- users ---------------------------------------------------------------------------
    def save_user(self, rec: UserRecord) -> None:
        self._put("_users", rec.name, rec)

    def get_user(self, name: str) -> UserRecord | None:
        return self._get("_users", name)

    def list_users(self) -> list[UserRecord]:
        with self._lock:
            return [copy.deepcopy(u) for _, u in sorted(self._users.items())]

    def delete_user(self, name: str) -> bool:
        return self._delete("_users", name)

    # --- audit ---------------------------------------------------------------------------
    def append_audit(self, *, time: float, actor: str, action: str, target: str, result: str, detail: dict[str, Any]) -> AuditRecord:
        with self._lock:
            seq = len(self._audit) + 1
            prev = self._audit[-1].hash if self._audit else GENESIS_HASH
            key_id, key = self.audit_key or (None, None)
            rec = AuditRecord(seq=seq, time=float(time), actor=actor, action=action, target=target,
                              result=result, detail=copy.deepcopy(detail), prev_hash=prev, hash="", key_id=key_id)
            rec.hash = audit_hash(seq=seq, time=rec.time, actor=actor, action=action, target=target,
                                  result=result, detail=rec.detail, prev_hash=prev, key_id=key_id, key=key)
            self._touch("_audit")
            self._audit.append(rec)
            return copy.deepcopy(rec)

    def list_audit(self, *, after_seq: int = 0, limit: int = 100) -> list[AuditRecord]:
        with self._lock:
            return [copy.deepcopy(r) for r in self._audit if r.seq > after_seq][:limit]

    def iter_audit(self) -> Iterator[AuditRecord]:
        with self._lock:
            records = [copy.deepcopy(r) for r in self._audit]
        return iter(records)

    def audit_archived_through(self) -> tuple[int, str]:
        return (0, GENESIS_HASH)

    def prune_audit(self, *, through_seq: int, through_hash: str, location: str, sha256: str,
                    created_at: float) -> int:
        raise ConflictError("the in-memory store keeps its audit trail whole (no retention)")

    def audit_head(self) -> tuple[int, str]:
        with self._lock:
            return (self._audit[-1].seq, self._audit[-1].hash) if self._audit else (0, GENESIS_HASH)

    def verify_audit(self) -> tuple[bool, int | None, str]:
        return verify_chain(self.iter_audit(), self.audit_keys).as_tuple()

    def tamper_audit(self, seq: int, **changes: Any) -> None:
        """Test hook: change a stored audit record in place, as an attacker with DB access would."""
        with self._lock:
            rec = self._audit[seq - 1]
            for k, v in changes.items():
                setattr(rec, k, v)


def _frozen(values: Sequence[float]) -> Any:
    """Values as a read-only float64 array, without a copy when they already are one (the
    health monitor's rollups): 8 bytes a value where a list of floats takes 32, and
    isolated from the caller as a copy would be, since nobody can write it."""
    a = np.asarray(values, np.float64)
    if a.flags.writeable:
        a = a.copy() if a is values else a
        a.flags.writeable = False
    return a


def _rollup_kept(r: RollupRecord) -> RollupRecord:
    """The stored form of a rollup: its values as read-only arrays."""
    return RollupRecord(r.cluster_id, r.scope, r.metric, r.resolution_s, r.t_start,
                        _frozen(r.avg), _frozen(r.min), _frozen(r.max), r.count)


def _rollup_copy(r: RollupRecord) -> RollupRecord:
    """A private copy of a stored rollup, with the record's lists of floats."""
    return RollupRecord(r.cluster_id, r.scope, r.metric, r.resolution_s, r.t_start,
                        np.asarray(r.avg).tolist(), np.asarray(r.min).tolist(), np.asarray(r.max).tolist(), r.count)


def _snapshot(container: Any) -> Any:
    """A rollback copy. Stored records are private deep copies that are replaced, never
    changed in place, so copying the containers (and the per-job checkpoint lists that
    are appended to) is enough; deep-copying the whole store per transaction made a
    long test run quadratic."""
    if isinstance(container, dict):
        return {k: list(v) if isinstance(v, list) else v for k, v in container.items()}
    return list(container)
