"""The store interface the control plane uses (implemented by ``podfleet.store.db.Store``).

Every method is synchronous and is called from the engine thread (single writer) or, for
reads, from API threads. ``transaction()`` groups writes so that e.g. a job, its
idempotency key and its audit record commit together or not at all; a method called
inside it joins that transaction, outside it commits on its own.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from podfleet.store.records import (
    AuditRecord,
    CheckpointRecord,
    ChipHealthRecord,
    ClusterRecord,
    JobRecord,
    TokenRecord,
)


class StoreProtocol(Protocol):
    url: str

    def transaction(self) -> AbstractContextManager[None]: ...
    def close(self) -> None: ...

    # clusters
    def save_cluster(self, rec: ClusterRecord) -> None: ...  # upsert by id
    def get_cluster(self, cluster_id: str) -> ClusterRecord | None: ...
    def find_cluster_by_name(self, name: str) -> ClusterRecord | None: ...  # live (not deleted) only
    def list_clusters(self, *, after: str | None = None, limit: int = 100, include_deleted: bool = False) -> list[ClusterRecord]: ...

    # jobs
    def save_job(self, rec: JobRecord) -> None: ...  # upsert by id
    def get_job(self, job_id: str) -> JobRecord | None: ...
    def list_jobs(self, *, cluster_id: str | None = None, states: Sequence[str] | None = None, after: str | None = None, limit: int = 100) -> list[JobRecord]: ...

    # chip health (one row per cluster chip)
    def save_chip_health(self, records: Sequence[ChipHealthRecord]) -> None: ...
    def list_chip_health(self, cluster_id: str) -> list[ChipHealthRecord]: ...

    # checkpoints
    def add_checkpoint(self, rec: CheckpointRecord) -> None: ...
    def latest_checkpoint(self, job_id: str) -> CheckpointRecord | None: ...

    # idempotency: a retried Create/Submit with the same clientToken returns the same resource
    def get_idempotent(self, operation: str, client_token: str) -> str | None: ...  # -> resource id
    def put_idempotent(self, operation: str, client_token: str, resource_id: str, request_hash: str) -> None: ...
    def idempotent_request_hash(self, operation: str, client_token: str) -> str | None: ...

    # tokens (hashed at rest)
    def add_token(self, rec: TokenRecord) -> None: ...
    def find_token_by_hash(self, token_hash: str) -> TokenRecord | None: ...
    def list_tokens(self) -> list[TokenRecord]: ...
    def count_tokens(self) -> int: ...

    # audit: append-only, hash-chained
    def append_audit(self, *, time: float, actor: str, action: str, target: str, result: str, detail: dict[str, Any]) -> AuditRecord: ...
    def list_audit(self, *, after_seq: int = 0, limit: int = 100) -> list[AuditRecord]: ...
    def iter_audit(self) -> Iterator[AuditRecord]: ...
    def verify_audit(self) -> tuple[bool, int | None, str]: ...  # (ok, first bad seq, message)
