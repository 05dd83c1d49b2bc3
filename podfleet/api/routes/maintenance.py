"""Maintenance rollouts: an admin's command run on each host of a cluster, one group of
chips at a time, the group's ranks moved away first (``recovery.maintenance``). Admin
only; under an ``MFARequired`` policy the start and the resume need a second factor."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, status
from pydantic import Field

from podfleet.api.auth import CurrentPrincipal
from podfleet.api.deps import REF_PATTERN, ClusterRef, Maintenance, Plane
from podfleet.api.schemas import (
    MAX_CHIP_INDEX,
    MAX_CHIPS,
    MaintenanceList,
    MaintenanceRollout,
    RequestBody,
)
from podfleet.errors import ConflictError
from podfleet.fabric.commands import MAX_COMMAND_CHARS
from podfleet.recovery.maintenance import MAX_TIMEOUT_S

router = APIRouter(prefix="/v1", tags=["maintenance"])

MaintenanceRef = Annotated[str, Path(pattern=REF_PATTERN, max_length=64, description="maintenance rollout id (mt-...)")]


class MaintenanceRequest(RequestBody):
    command: str = Field(min_length=1, max_length=MAX_COMMAND_CHARS, pattern=r"^[^\x00]*\S[^\x00]*$",
                         description="command line run on each host (split like a shell, run without one)")
    unit: Literal["chip", "host"] = "chip"
    chips: list[Annotated[int, Field(ge=0, le=MAX_CHIP_INDEX)]] | None = Field(
        None, min_length=1, max_length=MAX_CHIPS, description="default: every chip; a chip past the cluster's is a 404")
    max_failures: int = Field(1, ge=1, le=MAX_CHIPS, description="pause after this many failed groups")
    timeout_s: float = Field(600.0, gt=0, le=MAX_TIMEOUT_S, description="one host's command is killed after this")


@router.post("/clusters/{cluster}/maintenance", operation_id="StartMaintenance", response_model=MaintenanceRollout,
             status_code=status.HTTP_202_ACCEPTED)
async def start_maintenance(cluster: ClusterRef, body: MaintenanceRequest, plane: Plane, svc: Maintenance,
                            who: CurrentPrincipal) -> dict[str, Any]:
    """Rolling maintenance: per chip (or host) the ranks move away, the command runs, its
    exit code and output are kept, the chips are health-checked and return; a failing one
    stays cordoned with the reason, and the rollout pauses after ``max_failures``."""
    return await plane.call(svc.start, cluster, body.command, unit=body.unit, chips=body.chips,
                            max_failures=body.max_failures, timeout_s=body.timeout_s, actor=who.actor)


@router.get("/clusters/{cluster}/maintenance", operation_id="ListMaintenance", response_model=MaintenanceList)
async def list_maintenance(cluster: ClusterRef, plane: Plane, svc: Maintenance) -> dict[str, Any]:
    """Rollouts of a cluster, newest last; none for a fabric that cannot run host commands,
    and ``unavailable`` says why (``StartMaintenance`` refuses it with that sentence)."""
    try:
        return {"rollouts": await plane.call(svc.list, cluster)}
    except ConflictError as exc:  # the fabric's capability, not the request: an empty listing
        return {"rollouts": [], "unavailable": exc.message}


@router.get("/clusters/{cluster}/maintenance/{rollout}", operation_id="DescribeMaintenance",
            response_model=MaintenanceRollout)
async def describe_maintenance(cluster: ClusterRef, rollout: MaintenanceRef, plane: Plane,
                               svc: Maintenance) -> dict[str, Any]:
    return await plane.call(svc.describe, cluster, rollout)


@router.post("/clusters/{cluster}/maintenance/{rollout}/resume", operation_id="ResumeMaintenance",
             response_model=MaintenanceRollout)
async def resume_maintenance(cluster: ClusterRef, rollout: MaintenanceRef, plane: Plane, svc: Maintenance,
                             who: CurrentPrincipal) -> dict[str, Any]:
    """Go on with a rollout paused after its failures (the failed chips stay cordoned)."""
    return await plane.call(svc.resume, cluster, rollout, actor=who.actor)
