"""Record factories shared by the store tests."""

from __future__ import annotations

from podfleet.store.records import ClusterRecord, ClusterStatus, JobRecord


def cluster(i: int, *, name: str | None = None, state: str = "active") -> ClusterRecord:
    return ClusterRecord(
        id=f"cl-{i:03d}", name=name or f"pod-{i}", state=state,
        spec={"type": "trn2-ultraserver", "spares": i % 5, "dims": [4, 4, 4]},
        status=ClusterStatus(reason="deploying", deployment={"percent": 50, "steps": ["init", "fabric"]},
                             spares=[i % 5]), created_at=100.0 + i,
        updated_at=100.5 + i,
    )


def job(i: int, cluster_id: str = "cl-000", state: str = "PENDING") -> JobRecord:
    return JobRecord(
        id=f"job-{i:03d}", cluster_id=cluster_id, state=state,
        spec={"model": "debug", "chips": 8}, status={"step": i, "loss": 2.5 - i / 10},
        created_at=200.0 + i, updated_at=200.0 + i,
    )
