"""The store interfaces the control plane uses: one small protocol per noun, and
``StoreProtocol``, all of them together (implemented by ``podfleet.store.db.Store`` and
``podfleet.store.memory.MemoryStore``).

A part that keeps one noun takes that noun's protocol (``advisor.reports`` a
``ReportStore``, the token cache a ``TokenStore``...); a part that writes several nouns in
one commit takes ``StoreProtocol``. Each noun is implemented once per backend, in a module
named for it (``store/sql/<noun>.py``, ``store/memory/<noun>.py``), and the two stores are
compositions of those parts.

Every method is synchronous and is called from the engine thread (single writer) or, for
reads, from API threads. ``transaction()`` groups writes so that e.g. a job, its
idempotency key and its audit record commit together or not at all; a method called
inside it joins that transaction, outside it commits on its own. A nested
``transaction()`` is a savepoint: its writes roll back alone if its block raises.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from podfleet.store import records as r


class Transactional(Protocol):
    url: str

    def transaction(self) -> AbstractContextManager[None]: ...
    def close(self) -> None: ...
    def ping(self) -> bool: ...  # the database answers now (``/readyz``)


class ClusterStore(Protocol):
    """Clusters and their chips' health (one row per cluster chip)."""

    def save_cluster(self, rec: r.ClusterRecord) -> None: ...  # upsert by id
    def get_cluster(self, cluster_id: str) -> r.ClusterRecord | None: ...
    def find_cluster_by_name(self, name: str) -> r.ClusterRecord | None: ...  # live (not deleted) only
    def list_clusters(self, *, after: str | None = None, limit: int = 100,
                      include_deleted: bool = False) -> list[r.ClusterRecord]: ...
    def save_chip_health(self, records: Sequence[r.ChipHealthRecord]) -> None: ...
    def list_chip_health(self, cluster_id: str) -> list[r.ChipHealthRecord]: ...


class JobStore(Protocol):
    """Jobs and their checkpoints."""

    def save_job(self, rec: r.JobRecord) -> None: ...  # upsert by id
    def get_job(self, job_id: str) -> r.JobRecord | None: ...
    def list_jobs(self, *, cluster_id: str | None = None, states: Sequence[str] | None = None,
                  after: str | None = None, limit: int = 100) -> list[r.JobRecord]: ...
    def job_ids(self) -> list[str]: ...  # every job's id, in id order
    def job_specs(self, job_ids: Sequence[str]) -> dict[str, dict[str, Any]]: ...  # id -> stored spec
    def add_checkpoint(self, rec: r.CheckpointRecord) -> None: ...
    def latest_checkpoint(self, job_id: str) -> r.CheckpointRecord | None: ...
    def latest_checkpoint_steps(self, job_ids: Sequence[str]) -> dict[str, int]: ...  # job -> newest step
    def list_checkpoints(self, job_id: str) -> list[r.CheckpointRecord]: ...  # by step


class RollupStore(Protocol):
    """Telemetry rollups (1-minute and 1-hour buckets; retention by ``prune_rollups``)."""

    def save_rollups(self, records: Sequence[r.RollupRecord]) -> None: ...
    def list_rollups(self, cluster_id: str, *, resolution_s: float, since: float = 0.0, scope: str | None = None,
                     metric: str | None = None, limit: int = 100_000) -> list[r.RollupRecord]: ...
    def prune_rollups(self, *, resolution_s: float, before: float) -> int: ...


class JobMetricStore(Protocol):
    """Job metrics history (per-job rollup buckets; upsert by (job, resolution, t_start))."""

    def save_job_metrics(self, records: Sequence[r.JobMetricRecord]) -> None: ...
    def list_job_metrics(self, job_id: str, *, resolution_s: float, since: float = 0.0,
                         limit: int = 100_000) -> list[r.JobMetricRecord]: ...


class ReportStore(Protocol):
    """Archived health reports (retention by ``prune_reports``)."""

    def save_report(self, rec: r.ReportRecord) -> None: ...  # upsert by id
    def get_report(self, report_id: str) -> r.ReportRecord | None: ...
    def list_reports(self, cluster_id: str, *, limit: int = 1000) -> list[r.ReportRecord]: ...  # oldest first
    def prune_reports(self, *, before: float, cluster_id: str | None = None) -> int: ...


class QueueStore(Protocol):
    """What the scheduler is configured with: cluster queues and advance reservations
    (upsert by id; a (cluster, name) pair is unique; listed by cluster, name) and priority
    classes (upsert by name)."""

    def save_queue(self, rec: r.QueueRecord) -> None: ...
    def list_queues(self, cluster_id: str | None = None) -> list[r.QueueRecord]: ...
    def delete_queue(self, queue_id: str) -> bool: ...
    def save_reservation(self, rec: r.ReservationRecord) -> None: ...
    def list_reservations(self, cluster_id: str | None = None) -> list[r.ReservationRecord]: ...
    def delete_reservation(self, reservation_id: str) -> bool: ...
    def save_priority_class(self, rec: r.PriorityClassRecord) -> None: ...
    def list_priority_classes(self) -> list[r.PriorityClassRecord]: ...  # by name
    def delete_priority_class(self, name: str) -> bool: ...


class IdempotencyStore(Protocol):
    """A retried Create/Submit with the same client_token returns the same resource."""

    def get_idempotent(self, operation: str, client_token: str) -> str | None: ...  # -> resource id
    def put_idempotent(self, operation: str, client_token: str, resource_id: str, request_hash: str) -> None: ...
    def idempotent_request_hash(self, operation: str, client_token: str) -> str | None: ...


class TokenStore(Protocol):
    """API tokens (hashed at rest)."""

    def add_token(self, rec: r.TokenRecord) -> None: ...
    def find_token_by_hash(self, token_hash: str) -> r.TokenRecord | None: ...
    def list_tokens(self) -> list[r.TokenRecord]: ...
    def count_tokens(self) -> int: ...
    def get_token(self, token_id: str) -> r.TokenRecord | None: ...
    def revoke_token(self, token_id: str) -> None: ...  # NotFoundError if unknown


class UserStore(Protocol):
    """Users: their policies and (sealed) second factor."""

    def save_user(self, rec: r.UserRecord) -> None: ...
    def get_user(self, name: str) -> r.UserRecord | None: ...
    def list_users(self) -> list[r.UserRecord]: ...
    def delete_user(self, name: str) -> bool: ...


class AuditStore(Protocol):
    """The audit trail: append-only, hash-chained (keyed by ``use_audit_keys``)."""

    audit_keys: Mapping[str, bytes]

    def append_audit(self, *, time: float, actor: str, action: str, target: str, result: str,
                     detail: dict[str, Any]) -> r.AuditRecord: ...
    def list_audit(self, *, after_seq: int = 0, limit: int = 100) -> list[r.AuditRecord]: ...
    def iter_audit(self) -> Iterator[r.AuditRecord]: ...
    def verify_audit(self) -> tuple[bool, int | None, str]: ...  # (ok, first bad seq, message)
    def audit_head(self) -> tuple[int, str]: ...  # (seq, hash) of the newest record
    def audit_archived_through(self) -> tuple[int, str]: ...  # the chain's start after retention
    def prune_audit(self, *, through_seq: int, through_hash: str, location: str, sha256: str,
                    created_at: float) -> int: ...
    def use_audit_keys(self, key_id: str, key: bytes, older: Mapping[str, bytes] | None = None) -> None: ...


class StoreProtocol(Transactional, ClusterStore, JobStore, RollupStore, JobMetricStore, ReportStore, QueueStore,
                    IdempotencyStore, TokenStore, UserStore, AuditStore, Protocol):
    """Every noun, with one transaction across them."""
