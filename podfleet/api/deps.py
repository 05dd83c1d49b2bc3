"""Dependencies declared once as typed aliases."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query, Request

from podfleet.control.plane import ControlPlane
from podfleet.errors import ConflictError
from podfleet.health.service import HealthService


async def get_plane(request: Request) -> ControlPlane:
    # async: a sync dependency would cost a threadpool round trip on every request
    return request.app.state.plane


async def get_health(request: Request) -> HealthService:
    svc: HealthService | None = request.app.state.health
    if svc is None:
        raise ConflictError("health monitoring is not running on this control plane")
    return svc


Plane = Annotated[ControlPlane, Depends(get_plane)]
Health = Annotated[HealthService, Depends(get_health)]
NextToken = Annotated[str | None, Query(alias="nextToken", max_length=128, description="from the previous page")]
MaxResults = Annotated[int, Query(alias="maxResults", ge=1, le=1000)]
