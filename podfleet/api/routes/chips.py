"""Chip lifecycle: cordon, drain, uncordon, repair (``control.chips``), each audited."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from podfleet.api.auth import CurrentPrincipal
from podfleet.api.deps import ChipPath, ClusterRef, Plane
from podfleet.api.schemas import ChipLifecycleOut

router = APIRouter(prefix="/v1/clusters/{cluster}/chips/{chip}", tags=["chips"])
ChipIndex = ChipPath
# The operator's words, kept in the audit record and the cluster's log: one line of text.
Reason = Annotated[str | None, Query(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$",
                                     description="why (kept in the audit record and the cluster's log)")]


@router.post("/cordon", operation_id="CordonChip", response_model=ChipLifecycleOut)
async def cordon(cluster: ClusterRef, chip: ChipIndex, plane: Plane, who: CurrentPrincipal,
                 reason: Reason = None) -> dict[str, Any]:
    """No new placement or rank move lands on the chip; work already there keeps running."""
    return await plane.call(plane.chip_command, cluster, chip, "cordon", actor=who.actor, reason=reason)


@router.post("/drain", operation_id="DrainChip", response_model=ChipLifecycleOut)
async def drain(cluster: ClusterRef, chip: ChipIndex, plane: Plane, who: CurrentPrincipal,
                reason: Reason = None) -> dict[str, Any]:
    """Cordon, and move the rank on the chip to a spare or free chip through the recovery
    path; the chip reads ``cordoned`` once the rank has left (``draining`` until then)."""
    return await plane.call(plane.chip_command, cluster, chip, "drain", actor=who.actor, reason=reason)


@router.post("/uncordon", operation_id="UncordonChip", response_model=ChipLifecycleOut)
async def uncordon(cluster: ClusterRef, chip: ChipIndex, plane: Plane, who: CurrentPrincipal) -> dict[str, Any]:
    """Return the chip to placement."""
    return await plane.call(plane.chip_command, cluster, chip, "uncordon", actor=who.actor)


@router.post("/repair", operation_id="RepairChip", response_model=ChipLifecycleOut)
async def repair(cluster: ClusterRef, chip: ChipIndex, plane: Plane, who: CurrentPrincipal) -> dict[str, Any]:
    """Return a failed, isolated or degraded chip that no job holds to service (local and
    ray clusters get the worker slot back); it must read healthy afterwards."""
    return await plane.call(plane.chip_command, cluster, chip, "repair", actor=who.actor)
