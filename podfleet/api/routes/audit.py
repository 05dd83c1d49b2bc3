"""The audit trail: list and verify the hash chain."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from podfleet.api.deps import Audit, MaxResults
from podfleet.api.schemas import AuditList, AuditVerify
from podfleet.control.logbuf import rfc3339

router = APIRouter(prefix="/v1/audit", tags=["audit"])


@router.get("", operation_id="ListAuditEvents", response_model=AuditList)
def list_audit(log: Audit, next_token: Annotated[str | None, Query(alias="next_token", pattern=r"^\d{1,12}$")] = None,
                     max_results: MaxResults = 100) -> dict[str, Any]:
    after = int(next_token) if next_token else 0
    recs = log.list_audit(after_seq=after, limit=max_results + 1)
    page = recs[:max_results]
    events = [{**r.__dict__, "time": rfc3339(r.time)} for r in page]
    return {"events": events, "next_token": str(page[-1].seq) if len(recs) > max_results else None}


@router.get("/verify", operation_id="VerifyAuditChain", response_model=AuditVerify)
def verify_audit(request: Request, log: Audit,
                 allow_missing: Annotated[bool, Query(alias="allow_missing_digests", description=(
                     "accept records newer than every signed digest, or no digest at all"))] = False) -> dict[str, Any]:
    """The chain's MACs, links and sequence, and, where the server signs digests (every
    durable store), that the chain still holds every signed head (no deleted tail, no
    rewrite) in the digests of every location: the server first signs the head it checks,
    so a digest missing after it (deleted with the newest records) fails."""
    trail = request.app.state.audit_trail
    if trail is None:  # a store in memory: nothing outlives the process to truncate offline
        ok, bad, message = log.verify_audit()
        message += "; no signed digests (store in memory)" if ok else ""
    else:
        ok, bad, message = trail.verify(log.iter_audit(), log.audit_keys,
                                        allow_missing=allow_missing).as_tuple()
    return {"ok": ok, "first_bad_seq": bad, "message": message}
