"""The audit trail and its verification."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from podfleet.sdk.models import PageBody


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


class AuditList(PageBody):
    events: list[AuditEvent]


class AuditVerify(BaseModel):
    ok: bool
    first_bad_seq: int | None = None
    message: str
