"""Health, recovery and firmware: alerts, telemetry ranges, recoveries, rolling updates.

Served by the ``HealthService``, the ``RecoveryService`` and the ``FirmwareService`` the
composition root built (``podfleet.compose``); an app without one answers 409 with a sentence, never a 500, except for listings whose honest answer
is empty: nothing monitors the cluster, so no alert fires (``ListAlerts``), and a fabric that
cannot update firmware online has no rollouts (``ListFirmwareUpdates``, which says why). A
page reading every cluster's alerts or rollouts thus gets no error for such a cluster.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request, status
from pydantic import Field

from podfleet.api.auth import CurrentPrincipal
from podfleet.api.deps import AlertRef, ClusterRef, Firmware, Health, Plane, Recovery, RolloutRef
from podfleet.api.schemas import (
    MAX_CHIP_INDEX,
    MAX_CHIPS,
    MAX_LINK_INDEX,
    Alert,
    AlertList,
    FirmwareRollout,
    FirmwareRolloutList,
    RecoveryList,
    RequestBody,
    Telemetry,
)
from podfleet.errors import ConflictError, InvalidInputError
from podfleet.health.service import HealthService
from podfleet.health.telemetry import ALL_METRICS, CHIP_METRICS, LINK_METRICS
from podfleet.recovery.firmware import KNOWN_VERSIONS

router = APIRouter(prefix="/v1", tags=["health"])

AlertStateName = Literal["firing", "acknowledged", "resolved"]
RangeName = Literal["realtime", "hour", "day", "week", "quarter"]
ScopeName = Literal["chip", "link"]
Version = Literal[KNOWN_VERSIONS]  # type: ignore[valid-type]
MetricName = Literal[ALL_METRICS]  # type: ignore[valid-type]


class FirmwareUpdateRequest(RequestBody):
    version: Version
    unit: Literal["chip", "node"] = "chip"
    chips: list[Annotated[int, Field(ge=0, le=MAX_CHIP_INDEX)]] | None = Field(
        None, min_length=1, max_length=MAX_CHIPS, description="default: every chip; a chip past the cluster's is a 404")


async def optional_health(request: Request) -> HealthService | None:
    svc: HealthService | None = request.app.state.health
    return svc


MaybeHealth = Annotated[HealthService | None, Depends(optional_health)]


@router.get("/clusters/{cluster}/alerts", operation_id="ListAlerts", response_model=AlertList)
async def list_alerts(cluster: ClusterRef, plane: Plane, svc: MaybeHealth,
                      state: AlertStateName | None = None) -> dict[str, Any]:
    """Alerts of a cluster (kept after they resolve), oldest first; none where no health
    monitoring runs (nothing watches the cluster, so nothing fires)."""
    if svc is None:
        plane.resolve(cluster)  # an unknown cluster is still a 404
        return {"alerts": []}
    return {"alerts": await plane.call(svc.list_alerts, cluster, state)}


@router.post("/alerts/{alert_id}/acknowledge", operation_id="AcknowledgeAlert", response_model=Alert,
             response_model_exclude_unset=True)
async def acknowledge_alert(alert_id: AlertRef, plane: Plane, svc: Health,
                            who: CurrentPrincipal) -> dict[str, Any]:
    return await plane.call(svc.acknowledge, alert_id, actor=who.actor)


@router.get("/clusters/{cluster}/telemetry", operation_id="GetTelemetry", response_model=Telemetry)
async def get_telemetry(
    cluster: ClusterRef, plane: Plane, svc: Health,
    metric: Annotated[MetricName, Query(description="chip metrics: " + ", ".join(CHIP_METRICS) + "; link metrics: "
                                         + ", ".join(LINK_METRICS))] = "temperature_c",
    scope: ScopeName = "chip",
    range_: Annotated[RangeName, Query(alias="range")] = "realtime",
    target: Annotated[int | None, Query(ge=0, le=MAX_LINK_INDEX, description="chip or link index within the cluster; "
                                        "none: the mean (past the cluster's chips or links: a 404 naming them)")] = None,
) -> dict[str, Any]:
    """One metric over a range: ``realtime`` (raw 15-minute window), ``hour``/``day``
    (1-minute rollups), ``week``/``quarter`` (1-hour rollups)."""
    return await plane.call(svc.telemetry, cluster, scope=scope, metric=metric, range_=range_, target=target)


@router.get("/clusters/{cluster}/recoveries", operation_id="ListRecoveries", response_model=RecoveryList)
async def list_recoveries(cluster: ClusterRef, plane: Plane, svc: Recovery) -> dict[str, Any]:
    """Recovery flows with their steps (each with its reason and times)."""
    return {"recoveries": await plane.call(svc.list_recoveries, cluster)}


@router.post("/clusters/{cluster}/firmware", operation_id="StartFirmwareUpdate", response_model=FirmwareRollout,
             status_code=status.HTTP_202_ACCEPTED)
async def start_firmware(cluster: ClusterRef, body: FirmwareUpdateRequest, plane: Plane, svc: Firmware,
                         who: CurrentPrincipal) -> dict[str, Any]:
    """Rolling update: one chip (or node) at a time, a spare taking over its work, a health
    check after each, rollback on failure. 4xx and no change for an unknown version or
    while another rollout runs."""
    return await plane.call(svc.start_firmware, cluster, body.version, unit=body.unit, chips=body.chips,
                            actor=who.actor)


@router.get("/clusters/{cluster}/firmware", operation_id="ListFirmwareUpdates", response_model=FirmwareRolloutList)
async def list_firmware(cluster: ClusterRef, plane: Plane, svc: Firmware) -> dict[str, Any]:
    """Rollouts of a cluster, newest last; for a fabric that cannot update firmware online,
    none, and ``unavailable`` says why (``StartFirmwareUpdate`` refuses it with that sentence)."""
    try:
        return {"rollouts": await plane.call(svc.firmware_rollouts, cluster)}
    except (InvalidInputError, ConflictError) as exc:  # the fabric's capability or its configuration
        return {"rollouts": [], "unavailable": exc.message}


@router.get("/clusters/{cluster}/firmware/{rollout}", operation_id="DescribeFirmwareUpdate",
            response_model=FirmwareRollout)
async def describe_firmware(cluster: ClusterRef, rollout: RolloutRef, plane: Plane, svc: Firmware) -> dict[str, Any]:
    return await plane.call(svc.firmware_rollout, cluster, rollout)
