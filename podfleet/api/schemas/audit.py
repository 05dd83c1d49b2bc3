"""The audit trail and its verification."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class AuditEvent(BaseModel):
    seq: int
    time: str
    actor: str
    action: str
    target: str
    result: str
    detail: dict[str, Any]
    prev_hash: str
    hash: str


class AuditList(BaseModel):
    events: list[AuditEvent]
    nextToken: str | None = None


class AuditVerify(BaseModel):
    ok: bool
    first_bad_seq: int | None = None
    message: str
