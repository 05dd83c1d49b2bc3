"""Rows <-> records (the only place that knows both shapes), and shared argument checks."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import fields, replace
from typing import Any, TypeVar

from podfleet.errors import InvalidInputError
from podfleet.store.models import (
    AuditEventRow,
    ClusterRow,
)
from podfleet.store.records import (
    AuditRecord,
    ClusterRecord,
    ClusterStatus,
)

R = TypeVar("R")


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
        links=None if (links := d.get("links")) is None else {str(k): str(v) for k, v in links.items()},
    )


def row_of(r: Any) -> dict[str, Any]:
    """A record's row: its fields are the table's columns, by name."""
    return {f.name: r.__dict__[f.name] for f in fields(r)}


def record_of(cls: type[R], row: object) -> R:
    """The record of ``row``: the columns the record's fields name."""
    return cls(**{f.name: getattr(row, f.name) for f in fields(cls)})  # type: ignore[arg-type]


def cluster_row(r: ClusterRecord) -> dict[str, Any]:
    return {**row_of(r), "status": cluster_status_json(r.status)}


def cluster_record(r: ClusterRow) -> ClusterRecord:
    return replace(record_of(ClusterRecord, r), status=cluster_status(r.status))


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
