"""Operations intelligence: verify, diagnose, advise (and apply), the knowledge base.

The engine thread reads the cluster (``plane.call``); what takes seconds and touches no
live state (the rehearsed drill, the rehearsals that prove advice) runs in a worker
thread, so the timeline keeps its pace meanwhile.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import Field

from podfleet.advisor import advise, diagnose, kb, reports, verify
from podfleet.advisor import drill as drill_ops
from podfleet.advisor.checks import Check, verdict
from podfleet.api.auth import CurrentPrincipal
from podfleet.api.deps import ClusterRef, Plane
from podfleet.api.schemas import (
    AppliedRecommendation,
    Diagnosis,
    Guide,
    GuideList,
    HealthReport,
    Recommendations,
    ReportList,
    RequestBody,
    Verification,
)
from podfleet.control.plane import ControlPlane
from podfleet.fabric.base import COLLECTIVE_OPS
from podfleet.health.service import HealthService
from podfleet.recovery.service import RecoveryService

router = APIRouter(prefix="/v1", tags=["operations"])

Topic = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9-]*$")]
RecId = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^adv-[0-9a-f]+$")]
ReportId = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^rp-[0-9a-f]+$")]
CollectiveName = Literal[COLLECTIVE_OPS]  # type: ignore[valid-type]


class VerifyRequest(RequestBody):
    max_size_bytes: int = Field(verify.MAX_SIZE_BYTES, ge=8, le=verify.MAX_SIZE_BYTES,
                                description="largest collective size (8 B, 64 B, ... x8 up to it)")
    ops: list[CollectiveName] = Field(list(COLLECTIVE_OPS), min_length=1, max_length=len(COLLECTIVE_OPS),
                                      description=f"collectives: {', '.join(COLLECTIVE_OPS)}")
    compute: bool = True
    interconnect: bool = True
    drill: bool = True
    budget_s: float = Field(drill_ops.FAILOVER_BUDGET_S, gt=0, le=86400, description="failover budget of the drill")


def _health(request: Request) -> HealthService | None:
    svc: HealthService | None = request.app.state.health
    return svc


def _recovery(request: Request) -> RecoveryService | None:
    svc: RecoveryService | None = request.app.state.recovery
    return svc


def _book(request: Request) -> advise.AdviceBook:
    book: advise.AdviceBook | None = getattr(request.app.state, "advice", None)
    if book is None:
        book = request.app.state.advice = advise.AdviceBook()
    return book


def _verify_on_engine(plane: ControlPlane, cluster: str, opts: verify.VerifyOptions,
                      with_drill: bool) -> tuple[verify.Prepared, drill_ops.DrillPlan | None]:
    return verify.prepare(plane, cluster, opts), drill_ops.plan(plane, cluster) if with_drill else None


@router.post("/clusters/{cluster}/verify", operation_id="VerifyCluster", response_model=Verification)
async def verify_cluster(cluster: ClusterRef, body: VerifyRequest, plane: Plane, who: CurrentPrincipal) -> dict[str, Any]:
    """Acceptance checks: inventory, compute, interconnect (nccl-tests style table) and a
    failover drill; ``passed`` is false when any check failed."""
    opts = verify.VerifyOptions(max_size_bytes=body.max_size_bytes, ops=tuple(body.ops), compute=body.compute,
                                interconnect=body.interconnect)
    prepared, plan = await plane.call(_verify_on_engine, plane, cluster, opts, body.drill)
    # The probes (real ones spawn workers for seconds) and the drill run off the engine.
    checks: list[Check] = await asyncio.to_thread(verify.finish, prepared)
    if plan is not None:
        checks.append(await asyncio.to_thread(drill_ops.run, plan, budget_s=body.budget_s, plane=plane))
    cid = prepared.cluster_id
    out = verdict(cid, checks)
    await plane.call(plane.audit, who.actor, "VerifyCluster", cid, "ok" if out["passed"] else "failed",
                     {"status": out["status"], "checks": {c.name: c.status.value for c in checks}})
    return out


def _diagnose_on_engine(plane: ControlPlane, svc: HealthService | None, cluster: str) -> dict[str, Any]:
    alerts = svc.list_alerts(cluster) if svc is not None else []
    return diagnose.diagnose(plane, cluster, alerts)


@router.get("/clusters/{cluster}/diagnosis", operation_id="DiagnoseCluster", response_model=Diagnosis)
async def diagnose_cluster(cluster: ClusterRef, plane: Plane, request: Request) -> dict[str, Any]:
    """Findings: the faulty chip, link or memory, root cause, confidence, evidence, the
    documented repair steps and the runbook (``GET /v1/kb/{runbook}``)."""
    return await plane.call(_diagnose_on_engine, plane, _health(request), cluster)


@router.get("/clusters/{cluster}/recommendations", operation_id="GetRecommendations", response_model=Recommendations)
async def get_recommendations(cluster: ClusterRef, plane: Plane, request: Request) -> dict[str, Any]:
    """Advice from the running state, each rehearsed with and without its action; only a
    predicted gain of 2% or more is shown."""
    cands = await plane.call(advise.candidates, plane, cluster)
    recs = [r for r in await asyncio.gather(*(asyncio.to_thread(advise.prove, c) for c in cands)) if r is not None]
    _book(request).keep(recs)
    cid = cands[0].cluster_id if cands else (await plane.call(plane.resolve, cluster)).id
    return {"cluster_id": cid, "recommendations": [r.to_dict() for r in recs], "candidates": len(cands),
            "min_gain": advise.MIN_GAIN, "horizon_s": advise.HORIZON_S}


@router.post("/recommendations/{rec}/apply", operation_id="ApplyRecommendation",
             response_model=AppliedRecommendation, response_model_exclude_unset=True)
async def apply_recommendation(rec: RecId, plane: Plane, request: Request, who: CurrentPrincipal) -> dict[str, Any]:
    """Carry a recommendation out (audited); 409 when the cluster changed since it was made."""
    return await plane.call(_book(request).apply, plane, rec, actor=who.actor)


@router.get("/kb", operation_id="ListGuides", response_model=GuideList)
async def list_guides() -> dict[str, Any]:
    """The knowledge base: configuring parallelism, tuning, a runbook per fault kind, ..."""
    return {"guides": kb.list_guides()}


@router.get("/kb/{topic}", operation_id="GetGuide", response_model=Guide)
async def get_guide(topic: Topic) -> dict[str, str]:
    return kb.guide(topic)


# --- health reports ------------------------------------------------------------------------------
class ReportRequest(RequestBody):
    period: Literal[tuple(reports.PERIODS)] = Field("24h", description=f"one of {', '.join(reports.PERIODS)}")  # type: ignore[valid-type]


def _archive(request: Request) -> reports.Archive:
    """Where reports are kept: the store (``StoredReports``; ``podfleet up`` gives it the
    configured retention, ``PODFLEET_REPORT_RETENTION_DAYS``)."""
    arch: reports.Archive = request.app.state.reports
    return arch


def _report_on_engine(plane: ControlPlane, svc: HealthService | None, rec: RecoveryService | None, cluster: str,
                      period_s: float) -> dict[str, Any]:
    alerts = svc.list_alerts(cluster) if svc is not None else []
    recs = rec.recoveries(cluster) if rec is not None else []
    return reports.build(plane, alerts, recs, cluster, period_s)


@router.post("/clusters/{cluster}/reports", operation_id="CreateHealthReport", status_code=201,
             response_model=HealthReport, response_model_exclude_unset=True)
async def create_report(cluster: ClusterRef, body: ReportRequest, plane: Plane, request: Request) -> dict[str, Any]:
    """Generate a health report over the period and archive it (JSON and HTML with charts)."""
    period_s = reports.parse_period(body.period)
    rep = await plane.call(_report_on_engine, plane, _health(request), _recovery(request), cluster, period_s)
    await asyncio.to_thread(_archive(request).save, rep, now=plane.now())
    return rep


@router.get("/clusters/{cluster}/reports", operation_id="ListHealthReports", response_model=ReportList)
async def list_reports(cluster: ClusterRef, plane: Plane, request: Request) -> dict[str, Any]:
    cid = (await plane.call(plane.resolve, cluster)).id
    return {"cluster_id": cid, "reports": _archive(request).list(cid)}


@router.get("/clusters/{cluster}/reports/{report}", operation_id="GetHealthReport",
            responses={200: {"model": HealthReport, "content": {"application/json": {}, "text/html": {}}}})
async def get_report(cluster: ClusterRef, report: ReportId, plane: Plane, request: Request,
                     format_: Annotated[str, Query(alias="format", pattern="^(json|html)$")] = "json") -> Response:
    """An archived report, as JSON or as HTML (with its charts)."""
    cid = (await plane.call(plane.resolve, cluster)).id
    text = _archive(request).get(cid, report, format_)
    if format_ == "html":
        return HTMLResponse(text)
    return Response(text, media_type="application/json")
