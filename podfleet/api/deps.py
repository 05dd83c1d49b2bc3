"""Dependencies declared once as typed aliases."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query, Request

from podfleet.control.plane import ControlPlane


async def get_plane(request: Request) -> ControlPlane:
    # async: a sync dependency would cost a threadpool round trip on every request
    return request.app.state.plane


Plane = Annotated[ControlPlane, Depends(get_plane)]
NextToken = Annotated[str | None, Query(alias="nextToken", max_length=128, description="from the previous page")]
MaxResults = Annotated[int, Query(alias="maxResults", ge=1, le=1000)]
