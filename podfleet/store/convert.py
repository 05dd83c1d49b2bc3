"""Rows <-> records (the only place that knows both shapes), and shared argument checks."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from podfleet.errors import InvalidInputError
from podfleet.store.models import (
    AuditEventRow,
    CheckpointRow,
    ChipHealthRow,
    ClusterRow,
    JobRow,
    TokenRow,
)
from podfleet.store.records import (
    AuditRecord,
    CheckpointRecord,
    ChipHealthRecord,
    ClusterRecord,
    ClusterStatus,
    JobRecord,
    TokenRecord,
)


def cluster_status_json(s: ClusterStatus) -> dict[str, Any]:
    """The JSON column's form: the fields that are set (the shape rows had as a dict)."""
    return {f.name: copy.deepcopy(v) for f in fields(s) if (v := s.__dict__[f.name]) is not None}


def cluster_status(d: Mapping[str, Any] | None) -> ClusterStatus:
    """A stored status back; keys this version does not know are left out (an old row loads)."""
    d = d or {}
    spares, original = d.get("spares"), d.get("original_spares")
    connected = d.get("fabric_connected")
    return ClusterStatus(
        reason=str(d.get("reason") or ""), deployment=copy.deepcopy(d.get("deployment")),
        spares=None if spares is None else [int(c) for c in spares],
        original_spares=None if original is None else [int(c) for c in original],
        chip_modes=copy.deepcopy(d.get("chip_modes")),
        fabric_connected=None if connected is None else bool(connected),
    )


def cluster_row(r: ClusterRecord) -> dict[str, Any]:
    return {
        "id": r.id, "name": r.name, "state": r.state, "spec": r.spec, "status": cluster_status_json(r.status),
        "created_at": r.created_at, "updated_at": r.updated_at,
    }


def cluster_record(r: ClusterRow) -> ClusterRecord:
    return ClusterRecord(
        id=r.id, name=r.name, state=r.state, spec=r.spec, status=cluster_status(r.status),
        created_at=r.created_at, updated_at=r.updated_at,
    )


def job_row(r: JobRecord) -> dict[str, Any]:
    return {
        "id": r.id, "cluster_id": r.cluster_id, "state": r.state, "spec": r.spec,
        "status": r.status, "created_at": r.created_at, "updated_at": r.updated_at,
    }


def job_record(r: JobRow) -> JobRecord:
    return JobRecord(
        id=r.id, cluster_id=r.cluster_id, state=r.state, spec=r.spec, status=r.status,
        created_at=r.created_at, updated_at=r.updated_at,
    )


def chip_row(r: ChipHealthRecord) -> dict[str, Any]:
    return {
        "cluster_id": r.cluster_id, "chip": r.chip, "state": r.state, "spare": r.spare,
        "detail": r.detail,
    }


def chip_record(r: ChipHealthRow) -> ChipHealthRecord:
    return ChipHealthRecord(
        cluster_id=r.cluster_id, chip=r.chip, state=r.state, spare=r.spare, detail=r.detail
    )


def checkpoint_row(r: CheckpointRecord) -> dict[str, Any]:
    return {
        "id": r.id, "job_id": r.job_id, "step": r.step, "path": r.path,
        "created_at": r.created_at, "detail": r.detail,
    }


def checkpoint_record(r: CheckpointRow) -> CheckpointRecord:
    return CheckpointRecord(
        id=r.id, job_id=r.job_id, step=r.step, path=r.path, created_at=r.created_at,
        detail=r.detail,
    )


def token_row(r: TokenRecord) -> dict[str, Any]:
    return {
        "id": r.id, "name": r.name, "role": r.role, "token_hash": r.token_hash,
        "created_at": r.created_at, "revoked": r.revoked,
    }


def token_record(r: TokenRow) -> TokenRecord:
    return TokenRecord(
        id=r.id, name=r.name, role=r.role, token_hash=r.token_hash, created_at=r.created_at,
        revoked=r.revoked,
    )


def audit_row(r: AuditRecord, detail_text: str) -> dict[str, Any]:
    return {
        "seq": r.seq, "time": r.time, "actor": r.actor, "action": r.action,
        "target": r.target, "result": r.result, "detail": detail_text,
        "prev_hash": r.prev_hash, "hash": r.hash, "key_id": r.key_id,
    }


def audit_record(r: AuditEventRow) -> AuditRecord:
    """Raises ValueError when the stored detail is not JSON (a tampered row)."""
    return AuditRecord(
        seq=r.seq, time=r.time, actor=r.actor, action=r.action, target=r.target,
        result=r.result, detail=json.loads(r.detail), prev_hash=r.prev_hash, hash=r.hash, key_id=r.key_id,
    )


def check_limit(limit: int) -> None:
    if limit < 1:
        raise InvalidInputError(f"limit must be >= 1, got {limit}", field="limit")
