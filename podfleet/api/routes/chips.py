"""Chip lifecycle: cordon, drain, uncordon, repair (``control.chips``), each audited."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from podfleet.api.auth import CurrentPrincipal
from podfleet.api.deps import ChipPath, ClusterRef, Plane
from podfleet.api.schemas import ChipLifecycleOut

router = APIRouter(prefix="/v1/clusters/{cluster}/chips/{chip}", tags=["chips"])
ChipIndex = ChipPath


@router.post("/cordon", operation_id="CordonChip", response_model=ChipLifecycleOut)
async def cordon(cluster: ClusterRef, chip: ChipIndex, plane: Plane, who: CurrentPrincipal) -> dict[str, Any]:
    """No new placement or rank move lands on the chip; work already there keeps running."""
    return await plane.call(plane.chip_command, cluster, chip, "cordon", actor=who.actor)


@router.post("/drain", operation_id="DrainChip", response_model=ChipLifecycleOut)
async def drain(cluster: ClusterRef, chip: ChipIndex, plane: Plane, who: CurrentPrincipal) -> dict[str, Any]:
    """Cordon, and move the rank on the chip to a spare or free chip through the recovery
    path; the chip reads ``cordoned`` once the rank has left (``draining`` until then)."""
    return await plane.call(plane.chip_command, cluster, chip, "drain", actor=who.actor)


@router.post("/uncordon", operation_id="UncordonChip", response_model=ChipLifecycleOut)
async def uncordon(cluster: ClusterRef, chip: ChipIndex, plane: Plane, who: CurrentPrincipal) -> dict[str, Any]:
    """Return the chip to placement."""
    return await plane.call(plane.chip_command, cluster, chip, "uncordon", actor=who.actor)


@router.post("/repair", operation_id="RepairChip", response_model=ChipLifecycleOut)
async def repair(cluster: ClusterRef, chip: ChipIndex, plane: Plane, who: CurrentPrincipal) -> dict[str, Any]:
    """Return a failed, isolated or degraded chip that no job holds to service (local and
    ray clusters get the worker slot back); it must read healthy afterwards."""
    return await plane.call(plane.chip_command, cluster, chip, "repair", actor=who.actor)
